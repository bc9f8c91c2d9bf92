using System.CommandLine;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>
/// An entity's property options, in the order its `create` and `update` commands list them: each
/// a command-line option and how its value lands on the settings. Build one per command (options
/// belong to one command); the shared properties are declared once, in <see cref="SharedPropertyOptions"/>.
/// </summary>
internal sealed class PropertyOptions<TSettings>
{
    private readonly List<(Option Option, Func<ParseResult, TSettings, bool> Apply)> _options = [];

    public void AddTo(Command command)
    {
        foreach (var (option, _) in _options)
        {
            command.Options.Add(option);
        }
    }

    /// <summary>Assigns the options given on the command line; returns how many there were.</summary>
    public int ApplyTo(ParseResult parseResult, TSettings settings) => _options.Count(o => o.Apply(parseResult, settings));

    /// <summary>A duration such as 30s or 10m (or 'infinite' where allowed).</summary>
    public PropertyOptions<TSettings> Duration(string name, string description, Action<TSettings, TimeSpan> set, bool allowInfinite = false)
    {
        var option = new Option<string?>(name) { Description = description, HelpName = "DURATION" };
        return Add(option, (parseResult, settings) =>
        {
            if (parseResult.GetValue(option) is not { } text)
            {
                return false;
            }
            set(settings, CliValues.ParseDuration(name, text, allowInfinite));
            return true;
        });
    }

    /// <summary>A whole number of at least 1.</summary>
    public PropertyOptions<TSettings> AtLeastOne<T>(string name, string description, string helpName, Action<TSettings, T> set)
        where T : struct, System.Numerics.INumber<T>
    {
        var option = new Option<T?>(name) { Description = description, HelpName = helpName };
        return Add(option, (parseResult, settings) =>
        {
            if (parseResult.GetValue(option) is not { } value)
            {
                return false;
            }
            set(settings, value >= T.One ? value : throw new CliException(ExitCodes.BadInput, $"{name} must be at least 1, not {value}."));
            return true;
        });
    }

    /// <summary>true|false; counts only when given on the command line.</summary>
    public PropertyOptions<TSettings> Flag(string name, string description, Action<TSettings, bool> set)
    {
        var option = new Option<bool>(name) { Description = description };
        return Add(option, (parseResult, settings) =>
        {
            if (!CliValues.IsGiven(parseResult, option))
            {
                return false;
            }
            set(settings, parseResult.GetValue(option));
            return true;
        });
    }

    /// <summary>An entity name ('' clears); counts only when given on the command line.</summary>
    public PropertyOptions<TSettings> EntityName(string[] names, string description, Action<TSettings, string?> set)
    {
        var option = new Option<string?>(names[0], names[1..]) { Description = description, HelpName = "ENTITY" };
        return Add(option, (parseResult, settings) =>
        {
            if (!CliValues.IsGiven(parseResult, option))
            {
                return false;
            }
            set(settings, parseResult.GetValue(option));
            return true;
        });
    }

    private PropertyOptions<TSettings> Add(Option option, Func<ParseResult, TSettings, bool> apply)
    {
        _options.Add((option, apply));
        return this;
    }
}

/// <summary>The property options queues, topics and subscriptions share, declared once over the SDK's settings groups.</summary>
internal static class SharedPropertyOptions
{
    public static PropertyOptions<T> LockDuration<T>(this PropertyOptions<T> options) where T : IReceiverSettings =>
        options.Duration("--lock-duration", "How long a peek-lock holds a message, e.g. 30s (default 1m)", (s, v) => s.LockDuration = v);

    public static PropertyOptions<T> MaxDeliveryCount<T>(this PropertyOptions<T> options) where T : IReceiverSettings =>
        options.AtLeastOne<int>("--max-delivery-count", "Deliveries before a message is dead-lettered (default 10)", "N", (s, v) => s.MaxDeliveryCount = v);

    public static PropertyOptions<T> DefaultTtl<T>(this PropertyOptions<T> options) where T : IEntitySettings =>
        options.Duration("--default-ttl", "Default message time to live, e.g. 1d, or 'infinite' (default)", (s, v) => s.DefaultMessageTimeToLive = v, allowInfinite: true);

    public static PropertyOptions<T> DeadLetterOnExpiration<T>(this PropertyOptions<T> options, string description) where T : IReceiverSettings =>
        options.Flag("--dead-letter-on-expiration", description, (s, v) => s.DeadLetteringOnMessageExpiration = v);

    public static PropertyOptions<T> DuplicateDetection<T>(this PropertyOptions<T> options) where T : ISendTargetSettings =>
        options.Flag("--duplicate-detection", "Drop messages whose MessageId was seen within the duplicate window (true|false)", (s, v) => s.RequiresDuplicateDetection = v);

    public static PropertyOptions<T> DuplicateWindow<T>(this PropertyOptions<T> options) where T : ISendTargetSettings =>
        options.Duration("--duplicate-window", "Duplicate detection history window, e.g. 10m (default)", (s, v) => s.DuplicateDetectionHistoryTimeWindow = v);

    public static PropertyOptions<T> MaxSizeMb<T>(this PropertyOptions<T> options, string description) where T : ISendTargetSettings =>
        options.AtLeastOne<long>("--max-size-mb", description, "MB", (s, v) => s.MaxSizeInMegabytes = v);

    public static PropertyOptions<T> ForwardTo<T>(this PropertyOptions<T> options, string description) where T : IReceiverSettings =>
        options.EntityName(["--forward-to"], description, (s, v) => s.ForwardTo = v);

    public static PropertyOptions<T> ForwardDeadLetteredTo<T>(this PropertyOptions<T> options, string[] names, string description) where T : IReceiverSettings =>
        options.EntityName(names, description, (s, v) => s.ForwardDeadLetteredMessagesTo = v);

    public static PropertyOptions<T> BatchedOperations<T>(this PropertyOptions<T> options) where T : IEntitySettings =>
        options.Flag("--batched-operations", "Enable batched operations (true|false, default true)", (s, v) => s.EnableBatchedOperations = v);
}
