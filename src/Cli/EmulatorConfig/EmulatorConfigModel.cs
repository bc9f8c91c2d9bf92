namespace Farm.Cli.EmulatorConfig;

// What an Azure Service Bus emulator Config.json asks for, once read and checked. A property the
// file leaves out is null here, so the farm's default applies (Azure's defaults, not the
// emulator's: see README "Coming from the Azure Service Bus emulator"). Every item keeps the
// JSON path it came from, so a failure while applying it can name its place in the file.

/// <summary>The entities of every namespace of the file, in file order, and what was ignored.</summary>
internal sealed record EmulatorConfigFile(
    IReadOnlyList<QueueConfig> Queues,
    IReadOnlyList<TopicConfig> Topics,
    IReadOnlyList<string> Warnings);

/// <summary>The properties queues and subscriptions share (what receivers read from).</summary>
internal sealed record ReceiverConfig(
    TimeSpan? LockDuration,
    int? MaxDeliveryCount,
    TimeSpan? DefaultMessageTimeToLive,
    bool? DeadLetteringOnMessageExpiration,
    string? ForwardTo,
    string? ForwardDeadLetteredMessagesTo);

/// <summary>The duplicate detection settings queues and topics share.</summary>
internal sealed record DuplicateDetectionConfig(bool? RequiresDuplicateDetection, TimeSpan? HistoryTimeWindow);

internal sealed record QueueConfig(string Path, string Name, ReceiverConfig Receiver, DuplicateDetectionConfig DuplicateDetection);

internal sealed record TopicConfig(
    string Path,
    string Name,
    TimeSpan? DefaultMessageTimeToLive,
    DuplicateDetectionConfig DuplicateDetection,
    IReadOnlyList<SubscriptionConfig> Subscriptions);

/// <summary>A subscription; with no rules listed it gets <c>$Default</c> (every message), as in Azure.</summary>
internal sealed record SubscriptionConfig(string Path, string Name, ReceiverConfig Receiver, IReadOnlyList<RuleConfig> Rules);

/// <summary>A rule: exactly one of <see cref="SqlFilter"/> and <see cref="Correlation"/>, and an optional SQL action.</summary>
internal sealed record RuleConfig(string Path, string Name, string? SqlFilter, CorrelationConfig? Correlation, string? Action);

/// <summary>A correlation filter's conditions; application property values are string, long, double or bool.</summary>
internal sealed record CorrelationConfig(
    string? ContentType,
    string? CorrelationId,
    string? Subject,
    string? MessageId,
    string? ReplyTo,
    string? ReplyToSessionId,
    string? SessionId,
    string? To,
    IReadOnlyList<KeyValuePair<string, object>> Properties);

/// <summary>The file is not what Farm can apply: <see cref="JsonPath"/> says where (<c>UserConfig.Namespaces[0].Queues[2].Properties.LockDuration</c>).</summary>
internal sealed class EmulatorConfigException(string jsonPath, string problem) : Exception($"{jsonPath}: {problem}")
{
    public string JsonPath { get; } = jsonPath;

    public string Problem { get; } = problem;
}
