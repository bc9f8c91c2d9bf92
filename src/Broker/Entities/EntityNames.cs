using System.Text.RegularExpressions;

namespace Farm.Broker.Entities;

/// <summary>
/// Entity names and paths. A queue name is 1-260 characters of letters, digits, '.', '-' and '_',
/// starting and ending with a letter or digit (Azure Service Bus also allows '/', Farm does not:
/// it keeps '/' for sub-queue paths such as "orders/$DeadLetterQueue" and subscription paths such
/// as "orders/Subscriptions/audit"). A subscription name is 1-50 characters of the same kind.
/// Names are case-insensitive.
/// </summary>
public static partial class EntityNames
{
    public const int MaxLength = 260;
    public const string DeadLetterQueueSuffix = "/$DeadLetterQueue";
    public const string SubscriptionsSegment = "/Subscriptions/";
    public const int MaxSubscriptionNameLength = 50;

    [GeneratedRegex("^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")]
    private static partial Regex NamePattern();

    /// <summary>Null when valid; otherwise why not, in one line.</summary>
    public static string? Validate(string? name)
    {
        if (string.IsNullOrEmpty(name))
        {
            return "An entity name is required.";
        }
        if (name.Length > MaxLength)
        {
            return $"The entity name '{name[..20]}...' is {name.Length} characters long; the maximum is {MaxLength}.";
        }
        if (!NamePattern().IsMatch(name))
        {
            return $"The entity name '{name}' is invalid: use letters, digits, '.', '-' and '_', starting and ending with a letter or digit.";
        }
        return null;
    }

    /// <summary>Null when valid; otherwise why not, in one line.</summary>
    public static string? ValidateSubscriptionName(string? name)
    {
        if (string.IsNullOrEmpty(name))
        {
            return "A subscription name is required.";
        }
        if (name.Length > MaxSubscriptionNameLength)
        {
            return $"The subscription name '{name[..20]}...' is {name.Length} characters long; the maximum is {MaxSubscriptionNameLength}.";
        }
        if (!NamePattern().IsMatch(name))
        {
            return $"The subscription name '{name}' is invalid: use letters, digits, '.', '-' and '_', starting and ending with a letter or digit.";
        }
        return null;
    }

    /// <summary>"topic/Subscriptions/sub": the name a subscription has in the farm database and on the wire.</summary>
    public static string SubscriptionPath(string topic, string subscription) => topic + SubscriptionsSegment + subscription;

    public static bool IsSubscriptionPath(string? path) =>
        path is not null && path.Contains(SubscriptionsSegment, StringComparison.OrdinalIgnoreCase);

    /// <summary>Splits "topic/Subscriptions/sub" into its parts; false when the path is not a subscription path.</summary>
    public static bool TrySplitSubscriptionPath(string path, out string topic, out string subscription)
    {
        var at = path.IndexOf(SubscriptionsSegment, StringComparison.OrdinalIgnoreCase);
        topic = at < 0 ? "" : path[..at];
        subscription = at < 0 ? "" : path[(at + SubscriptionsSegment.Length)..];
        return at >= 0;
    }

    /// <summary>
    /// Splits "queue", "queue/$DeadLetterQueue", "topic/Subscriptions/sub" or
    /// "topic/Subscriptions/sub/$DeadLetterQueue" into the entity name and the sub-queue.
    /// </summary>
    public static bool TryParsePath(string? path, out string name, out bool deadLetter, out string? error)
    {
        name = "";
        deadLetter = false;
        if (path is not null && path.EndsWith(DeadLetterQueueSuffix, StringComparison.OrdinalIgnoreCase))
        {
            deadLetter = true;
            path = path[..^DeadLetterQueueSuffix.Length];
        }
        if (path is not null && TrySplitSubscriptionPath(path, out var topic, out var subscription))
        {
            error = Validate(topic) ?? ValidateSubscriptionName(subscription);
            if (error is not null)
            {
                error = $"'{path}' is not a valid subscription path (topic/Subscriptions/name): {error}";
                return false;
            }
            name = SubscriptionPath(topic, subscription);
            return true;
        }
        error = Validate(path);
        if (error is not null)
        {
            return false;
        }
        name = path!;
        return true;
    }
}
