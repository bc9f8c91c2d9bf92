using System.CommandLine;
using Farm.Cli.Entities;
using Farm.Cli.Messaging;
using Farm.Cli.Security;

namespace Farm.Cli.Tests;

/// <summary>The command tree accepts the documented synopses (parsing only; nothing runs).</summary>
public class CommandLineTests
{
    private static RootCommand Root() => new()
    {
        CliContext.ConnectionOption,
        CliContext.DataOption,
        TopicCommands.Create(),
        SubscriptionCommands.Create(),
        RuleCommands.Create(),
        SendCommand.Create(),
        ReceiveCommand.Create(),
        PeekCommand.Create(),
        QueueCommands.Create(),
        DeadLetterCommands.Create(),
        Farm.Cli.Hosting.StatusCommand.Create(),
        ContainerCommands.Create(),
        ServerCommands.Create(),
        Farm.Cli.Hosting.NodeCommands.Create(),
        Farm.Cli.Hosting.UpCommand.Create(),
        AuthCommands.Create(),
        ConnectionStringCommand.Create(),
    };

    [Theory]
    [InlineData("topic create events --support-ordering true --default-ttl 1d --duplicate-detection --max-size-mb 10 --batched-operations false")]
    [InlineData("topic show events --json")]
    [InlineData("topic update events --support-ordering false")]
    [InlineData("topic delete events")]
    [InlineData("topic list")]
    [InlineData("subscription create events audit --sql-filter \"color = 'red'\" --action \"SET seen = TRUE\" --lock-duration 30s --max-delivery-count 3")]
    [InlineData("subscription create events audit --correlation-filter sys.CorrelationId=x color=red --forward-to q --forward-dead-letters-to dl")]
    [InlineData("subscription create events audit --dead-letter-on-expiration true --dead-letter-on-filter-errors false --default-ttl 1h")]
    [InlineData("subscription show events audit")]
    [InlineData("subscription update events audit --max-delivery-count 5")]
    [InlineData("subscription delete events audit")]
    [InlineData("subscription list events --json")]
    [InlineData("rule add events audit red --sql-filter \"color = 'red'\"")]
    [InlineData("rule add events audit corr --correlation-filter sys.Label=new --action \"SET x = 1\"")]
    [InlineData("rule remove events audit red")]
    [InlineData("rule list events audit --json")]
    [InlineData("send events --property color=red --correlation-id c --subject s")]
    [InlineData("receive events/Subscriptions/audit --count 5")]
    [InlineData("receive events/Subscriptions/audit/$DeadLetterQueue")]
    [InlineData("peek events/Subscriptions/audit --dead-letter-queue")]
    [InlineData("queue purge orders")]
    [InlineData("queue purge events/Subscriptions/audit --dead-letter-queue")]
    [InlineData("dead-letter resubmit orders")]
    [InlineData("dead-letter resubmit orders --count 10")]
    [InlineData("dead-letter resubmit orders --sequence-number 4 --sequence-number 7")]
    [InlineData("status --watch --interval 0.5 --count 10 --json")]
    [InlineData("server add east --connection Host=db-east;Username=farm")]
    [InlineData("server list --json")]
    [InlineData("server remove east")]
    [InlineData("container create --count 2 --server east")]
    [InlineData("node kill 2 --engine podman")]
    [InlineData("node start 2 --engine docker")]
    [InlineData("auth policy create sender --rights Send,Listen")]
    [InlineData("auth policy list")]
    [InlineData("auth policy list --show-keys --json")]
    [InlineData("auth policy delete sender")]
    [InlineData("auth policy renew-key sender")]
    [InlineData("auth policy renew-key sender --key secondary")]
    [InlineData("connection-string")]
    [InlineData("connection-string --amqp")]
    [InlineData("connection-string --amqp --policy sender --node 2")]
    [InlineData("up --nodes 3 --port 5480 --amqp-port 5672 --metrics-port 9100 --detach")]
    [InlineData("up --port 0 --amqp-port 0")]
    public void Synopsis_Parses(string line)
    {
        var result = Root().Parse(line);

        Assert.True(result.Errors.Count == 0, string.Join("; ", result.Errors.Select(e => e.Message)));
    }

    [Theory]
    [InlineData("subscription create events")]
    [InlineData("rule add events audit")]
    [InlineData("rule list events")]
    [InlineData("topic update")]
    [InlineData("topic update events --support-ordering maybe")]
    [InlineData("queue purge")]
    [InlineData("dead-letter resubmit orders --sequence-number x")]
    [InlineData("status --watch --interval soon")]
    [InlineData("server add east")]
    [InlineData("server remove")]
    [InlineData("auth policy create sender")]
    [InlineData("auth policy delete")]
    [InlineData("auth policy renew-key sender --key tertiary")]
    [InlineData("connection-string --amqp --node two")]
    [InlineData("up --amqp-port many")]
    public void IncompleteCommands_AreParseErrors(string line)
    {
        Assert.NotEmpty(Root().Parse(line).Errors);
    }
}
