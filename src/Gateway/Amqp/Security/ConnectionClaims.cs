using Farm.ContainerStore.FarmDatabase;

namespace Farm.Gateway.Amqp.Security;

/// <summary>
/// What one AMQP connection may do, as its put-tokens granted it: per audience (an entity path,
/// or "" for the whole farm), the rights of the token's policy until the token expires. A later
/// token for the same audience replaces the earlier one (an SDK renews its tokens before they
/// expire).
/// </summary>
internal sealed class ConnectionClaims(TimeProvider time)
{
    private readonly Lock _lock = new();
    private readonly Dictionary<string, (AccessRights Rights, DateTimeOffset ExpiresAt)> _grants = new(StringComparer.OrdinalIgnoreCase);

    public void Grant(string audiencePath, AccessRights rights, DateTimeOffset expiresAt)
    {
        lock (_lock)
        {
            _grants[audiencePath] = (rights, expiresAt);
        }
    }

    /// <summary>
    /// When the longest-lived unexpired grant covering <paramref name="entityPath"/> with
    /// <paramref name="right"/> expires; null when none does now.
    /// </summary>
    public DateTimeOffset? ValidUntil(string entityPath, AccessRights right)
    {
        var now = time.GetUtcNow();
        DateTimeOffset? best = null;
        lock (_lock)
        {
            foreach (var (audience, grant) in _grants)
            {
                if (grant.ExpiresAt > now && Allows(grant.Rights, right) && SharedAccessSignature.Covers(audience, entityPath)
                    && (best is null || grant.ExpiresAt > best))
                {
                    best = grant.ExpiresAt;
                }
            }
        }
        return best;
    }

    /// <summary>Manage includes Send and Listen, as in Azure Service Bus.</summary>
    public static bool Allows(AccessRights granted, AccessRights needed) =>
        (granted & AccessRights.Manage) != 0 || (granted & needed) == needed;
}
