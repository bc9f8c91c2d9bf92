using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.Reflection;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Contracts.Tests;

/// <summary>The wire contract's safety rules (issue 8, paths 17 and 18).</summary>
public sealed class ContractSafetyTests
{
    /// <summary>
    /// A Message with every field set, serialised by the contract as it was at c608d2f (before the
    /// enums were renumbered). Container databases store exactly these bytes as a message's payload:
    /// whatever the contract becomes, they must still read back the same.
    /// </summary>
    private const string PayloadFromC608d2f =
        "CgRib2R5EgJpZBoEY29yciIEc2VzcyoEc3ViajIKdGV4dC9wbGFpbjoCdG9CBXJlcGx5SgVyc2Vzc1ICCFpaBgil69zKBmILCgFzEgYKBHRleHRiDAoBbBIHEICAgICAIGIHCgFpEgIYKmIOCgFkEgkhAAAAAAAABEBiBwoBYhICKAFiCgoBeRIFMgMBAgNiDQoBdBIIOgYIqZjgzwZiCgoBdRIFQgMItAFiKwoBZxImSiQ3ZjBjMWE5ZS0wMDAwLTQwMDAtODAwMC0wMDAwMDAwMDAwMDE=";

    [Fact]
    public void AStoredPayloadWrittenByTheOldContract_ReadsBackWithEveryValue()
    {
        var message = Message.Parser.ParseFrom(Convert.FromBase64String(PayloadFromC608d2f));

        Assert.Equal(("body", "id", "corr", "sess", "subj", "text/plain", "to", "reply", "rsess"),
            (message.Body.ToStringUtf8(), message.MessageId, message.CorrelationId, message.SessionId, message.Subject,
             message.ContentType, message.To, message.ReplyTo, message.ReplyToSessionId));
        Assert.Equal(TimeSpan.FromSeconds(90), message.TimeToLive.ToTimeSpan());
        Assert.Equal(new DateTimeOffset(2026, 1, 2, 3, 4, 5, TimeSpan.Zero), message.ScheduledEnqueueTime.ToDateTimeOffset());
        var p = message.ApplicationProperties;
        Assert.Equal("text", p["s"].StringValue);
        Assert.Equal(1L << 40, p["l"].LongValue);
        Assert.Equal(42, p["i"].IntValue);
        Assert.Equal(2.5, p["d"].DoubleValue);
        Assert.True(p["b"].BoolValue);
        Assert.Equal(new byte[] { 1, 2, 3 }, p["y"].BytesValue.ToByteArray());
        Assert.Equal(new DateTimeOffset(2026, 5, 4, 3, 2, 1, TimeSpan.Zero), p["t"].TimestampValue.ToDateTimeOffset());
        Assert.Equal(TimeSpan.FromMinutes(3), p["u"].DurationValue.ToTimeSpan());
        Assert.Equal("7f0c1a9e-0000-4000-8000-000000000001", p["g"].GuidValue);
        Assert.Equal(PayloadFromC608d2f, Convert.ToBase64String(message.ToByteArray()));
    }

    public static TheoryData<string> Enums() =>
        [.. new[] { MessagesReflection.Descriptor, MessagingReflection.Descriptor, ManagementReflection.Descriptor, ErrorsReflection.Descriptor, NodeControlReflection.Descriptor }
            .SelectMany(f => f.EnumTypes.Concat(f.MessageTypes.SelectMany(m => m.EnumTypes)))
            .Select(e => e.FullName)];

    [Theory]
    [MemberData(nameof(Enums))]
    public void EveryEnum_HasAnUnspecifiedZero_AndItsValuesCarryItsPrefix(string fullName)
    {
        var descriptor = AllEnums().Single(e => e.FullName == fullName);
        var prefix = ScreamingSnake(descriptor.Name) + "_";

        Assert.Equal(prefix + "UNSPECIFIED", descriptor.FindValueByNumber(0)?.Name);
        Assert.All(descriptor.Values, v => Assert.StartsWith(prefix, v.Name, StringComparison.Ordinal));
    }

    [Fact]
    public void NodeToNodeAndOperatorCalls_AreNotInThePublicManagementService()
    {
        var management = ManagementReflection.Descriptor.Services.Single(s => s.Name == "Management");
        var control = NodeControlReflection.Descriptor.Services.Single(s => s.Name == "NodeControl");

        Assert.DoesNotContain(management.Methods, m => m.Name is "TakeContainer" or "MoveContainer" or "DrainNode");
        Assert.Equal(["MoveContainer", "DrainNode", "TakeContainer"], control.Methods.Select(m => m.Name));
    }

    private static IEnumerable<EnumDescriptor> AllEnums() =>
        new[] { MessagesReflection.Descriptor, MessagingReflection.Descriptor, ManagementReflection.Descriptor, ErrorsReflection.Descriptor, NodeControlReflection.Descriptor }
            .SelectMany(f => f.EnumTypes.Concat(f.MessageTypes.SelectMany(m => m.EnumTypes)));

    private static string ScreamingSnake(string pascal) =>
        string.Concat(pascal.Select((c, i) => i > 0 && char.IsUpper(c) ? "_" + c : char.ToUpperInvariant(c).ToString()));
}
