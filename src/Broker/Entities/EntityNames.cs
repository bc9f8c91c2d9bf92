using System.Text.RegularExpressions;

namespace Farm.Broker.Entities;

/// <summary>
/// Entity names and paths. A queue name is 1-260 characters of letters, digits, '.', '-' and '_',
/// starting and ending with a letter or digit (Azure Service Bus also allows '/', Farm does not:
/// it keeps '/' for sub-queue paths such as "orders/$DeadLetterQueue"). Names are case-insensitive.
/// </summary>
public static partial class EntityNames
{
    public const int MaxLength = 260;
    public const string DeadLetterQueueSuffix = "/$DeadLetterQueue";

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

    /// <summary>Splits "queue" or "queue/$DeadLetterQueue" into the entity name and the sub-queue.</summary>
    public static bool TryParsePath(string? path, out string name, out bool deadLetter, out string? error)
    {
        name = "";
        deadLetter = false;
        if (path is not null && path.EndsWith(DeadLetterQueueSuffix, StringComparison.OrdinalIgnoreCase))
        {
            deadLetter = true;
            path = path[..^DeadLetterQueueSuffix.Length];
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
