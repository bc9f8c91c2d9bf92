using System.Collections.Frozen;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Rules;

/// <summary>
/// The message's system properties as filters (<c>sys.Name</c>) and actions see them. The names
/// are the Azure Service Bus broker properties ("Messages, payloads, and serialization") that Farm
/// messages have; Subject and Label are the same property. Properties the broker assigns are
/// read-only: an action may set only what a sender could set.
/// </summary>
internal sealed class SystemProperty
{
    private readonly Func<RuleMessage, SqlValue> _get;
    private readonly Action<RuleMessage, SqlValue>? _set;

    private SystemProperty(string name, Func<RuleMessage, SqlValue> get, Action<RuleMessage, SqlValue>? set)
    {
        Name = name;
        _get = get;
        _set = set;
    }

    public string Name { get; }

    public bool IsSettable => _set is not null;

    public SqlValue Get(RuleMessage message) => _get(message);

    public void Set(RuleMessage message, in SqlValue value) =>
        (_set ?? throw new InvalidOperationException($"sys.{Name} is read-only."))(message, value);

    private static readonly SystemProperty[] All =
    [
        Text("MessageId", m => m.MessageId, (m, v) => m.MessageId = v),
        Text("CorrelationId", m => m.CorrelationId, (m, v) => m.CorrelationId = v),
        Text("SessionId", m => m.SessionId, (m, v) => m.SessionId = v),
        Text("Label", m => m.Subject, (m, v) => m.Subject = v),
        Text("Subject", m => m.Subject, (m, v) => m.Subject = v),
        Text("ContentType", m => m.ContentType, (m, v) => m.ContentType = v),
        Text("To", m => m.To, (m, v) => m.To = v),
        Text("ReplyTo", m => m.ReplyTo, (m, v) => m.ReplyTo = v),
        Text("ReplyToSessionId", m => m.ReplyToSessionId, (m, v) => m.ReplyToSessionId = v),
        new("SequenceNumber", m => SqlValue.FromLong(m.SequenceNumber), null),
        // Farm does not forward with a new sequence number yet: the first one is the one it has.
        new("EnqueuedSequenceNumber", m => SqlValue.FromLong(m.SequenceNumber), null),
        new("EnqueuedTimeUtc", m => SqlValue.FromDateTime(m.EnqueuedTime.UtcDateTime), null),
        new("DeliveryCount", m => SqlValue.FromInt(m.DeliveryCount), null),
        new("Size", m => SqlValue.FromLong(m.Size), null),
        new("ExpiresAtUtc", m => m.ExpiresAt is { } at ? SqlValue.FromDateTime(at.UtcDateTime) : SqlValue.Null, null),
        new("TimeToLive",
            m => m.TimeToLive is { } ttl ? SqlValue.FromTimeSpan(ttl) : SqlValue.Null,
            (m, v) =>
            {
                m.Message.TimeToLive = v.IsNull ? null : Duration.FromTimeSpan(Require(v, SqlKind.TimeSpan, "TimeToLive").AsTimeSpan);
                m.TimeToLiveChanged();
            }),
        new("ScheduledEnqueueTimeUtc",
            m => m.Message.ScheduledEnqueueTime is { } at ? SqlValue.FromDateTime(at.ToDateTime()) : SqlValue.Null,
            (m, v) => m.Message.ScheduledEnqueueTime = v.IsNull
                ? null
                : Timestamp.FromDateTime(Require(v, SqlKind.DateTime, "ScheduledEnqueueTimeUtc").AsDateTime)),
    ];

    private static readonly FrozenDictionary<string, SystemProperty> ByName =
        All.ToFrozenDictionary(p => p.Name, StringComparer.OrdinalIgnoreCase);

    /// <summary>Case-insensitive, like every property name in Azure Service Bus rules.</summary>
    public static bool TryFind(string name, out SystemProperty property) =>
        ByName.TryGetValue(name, out property!);

    public static IEnumerable<string> Names => All.Select(p => p.Name);

    // A string system property: proto3's empty string reads as NULL, and setting it to NULL clears
    // it. Other values are converted to their invariant text ("implicit conversion if possible").
    private static SystemProperty Text(string name, Func<Farm.Contracts.V1.Message, string> get, Action<Farm.Contracts.V1.Message, string> set) =>
        new(name, m => SqlValue.FromOptionalString(get(m.Message)), (m, v) => set(m.Message, v.IsNull ? "" : v.ToInvariantString()));

    private static SqlValue Require(in SqlValue value, SqlKind kind, string name) =>
        value.Kind == kind
            ? value
            : throw new RuleEvaluationException(
                $"sys.{name} must be set to a {SqlValue.KindName(kind)} value; got {SqlValue.KindName(value.Kind)} {value}.");
}
