using Farm.Cli.Hosting;
using Farm.Cli.Security;
using Farm.Client;

namespace Farm.Cli.Tests;

/// <summary>How the CLI reads access rights, chooses AMQP ports and writes AMQP connection strings (no farm needed).</summary>
public class AccessPolicyOptionTests
{
    [Theory]
    [InlineData("Send,Listen", AccessRights.Send | AccessRights.Listen)]
    [InlineData(" send , LISTEN ", AccessRights.Send | AccessRights.Listen)]
    [InlineData("Manage", AccessRights.Manage)]
    [InlineData("listen,Listen", AccessRights.Listen)]
    public void Rights_AreCommaSeparatedWords_InAnyCase(string text, AccessRights expected) =>
        Assert.Equal(expected, AccessRightsText.Parse(text));

    [Theory]
    [InlineData("")]
    [InlineData(" , ")]
    [InlineData("Send,Read")]
    [InlineData("All")]
    public void Rights_NoneOrAnUnknownWord_AreBadInput(string text)
    {
        var error = Assert.Throws<CliException>(() => AccessRightsText.Parse(text));

        Assert.Equal(ExitCodes.BadInput, error.ExitCode);
    }

    [Fact]
    public void Rights_AreShownManageSendListen_InThatOrder() =>
        Assert.Equal("Manage,Send,Listen", AccessRightsText.Format(AccessRights.Listen | AccessRights.Manage | AccessRights.Send));

    [Theory]
    [InlineData(UpCommand.DefaultPort, null, UpCommand.DefaultAmqpPort)]
    [InlineData(0, null, 0)]
    [InlineData(6000, null, 0)]
    [InlineData(0, 7000, 7000)]
    [InlineData(UpCommand.DefaultPort, 0, 0)]
    public void AmqpPort_Is5672OnlyForTheDefaultGrpcPort_UnlessGiven(int grpcPort, int? given, int expected) =>
        Assert.Equal(expected, UpCommand.AmqpPortFor(grpcPort, given));

    [Fact]
    public void AmqpConnectionString_NamesTheNodesHostAndPort_AndThePolicysPrimaryKey()
    {
        var policy = new SharedAccessPolicyProperties { Name = "sender", PrimaryKey = "cHJpbWFyeQ==", SecondaryKey = "c2Vjb25kYXJ5" };

        Assert.Equal(
            "Endpoint=sb://127.0.0.1:5673/;SharedAccessKeyName=sender;SharedAccessKey=cHJpbWFyeQ==;UseDevelopmentEmulator=true",
            AmqpConnectionString.For("amqp://127.0.0.1:5673", policy));
    }

    [Fact]
    public void AmqpAddress_IsTheFirstLiveNodesThatListens_OrExit4()
    {
        FarmNodeProperties Node(long id, string? amqp, string state = "active", double ageSeconds = 0.5) =>
            new() { Id = id, State = state, Address = $"http://127.0.0.1:{5479 + id}", HeartbeatAge = TimeSpan.FromSeconds(ageSeconds), AmqpAddress = amqp };
        var status = new FarmStatusProperties
        {
            Nodes = [Node(3, "amqp://127.0.0.1:5674"), Node(1, "amqp://127.0.0.1:5672", ageSeconds: 30), Node(2, null)],
        };

        Assert.Equal("amqp://127.0.0.1:5674", ConnectionStringCommand.AmqpAddressOf(status, nodeId: null));
        Assert.Equal("amqp://127.0.0.1:5672", ConnectionStringCommand.AmqpAddressOf(status, nodeId: 1));
        Assert.Equal(ExitCodes.Unreachable, Assert.Throws<CliException>(() => ConnectionStringCommand.AmqpAddressOf(status, nodeId: 2)).ExitCode);
        Assert.Equal(ExitCodes.BadInput, Assert.Throws<CliException>(() => ConnectionStringCommand.AmqpAddressOf(status, nodeId: 7)).ExitCode);
        Assert.Equal(ExitCodes.Unreachable, Assert.Throws<CliException>(() => ConnectionStringCommand.AmqpAddressOf(new FarmStatusProperties { Nodes = [Node(2, null)] }, null)).ExitCode);
    }
}
