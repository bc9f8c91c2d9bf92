using Farm.Client;

namespace Farm.Cli.Security;

/// <summary>Access rights as the CLI reads and shows them: "Manage", "Send", "Listen", comma-separated, case-insensitive.</summary>
public static class AccessRightsText
{
    /// <summary>"Send,Listen" → Send | Listen. Exit 2 for nothing, or a word that names no right.</summary>
    public static AccessRights Parse(string? text)
    {
        var rights = AccessRights.None;
        foreach (var word in (text ?? "").Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries))
        {
            rights |= word.ToLowerInvariant() switch
            {
                "manage" => AccessRights.Manage,
                "send" => AccessRights.Send,
                "listen" => AccessRights.Listen,
                _ => throw new CliException(ExitCodes.BadInput, $"--rights: '{word}' is not an access right; use Manage, Send or Listen, comma-separated."),
            };
        }
        return rights == AccessRights.None
            ? throw new CliException(ExitCodes.BadInput, "--rights needs at least one of Manage, Send and Listen (e.g. --rights Send,Listen).")
            : rights;
    }

    /// <summary>The rights a policy has, in the order Manage, Send, Listen, as the words <see cref="Parse"/> reads.</summary>
    public static IReadOnlyList<string> Words(AccessRights rights) =>
        [.. new[] { (AccessRights.Manage, "Manage"), (AccessRights.Send, "Send"), (AccessRights.Listen, "Listen") }
            .Where(r => rights.HasFlag(r.Item1)).Select(r => r.Item2)];

    public static string Format(AccessRights rights) => string.Join(',', Words(rights));
}
