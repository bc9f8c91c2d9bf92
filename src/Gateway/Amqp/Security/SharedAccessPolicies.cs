using Farm.Broker.Node;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.Gateway.Amqp.Security;

/// <summary>The farm's shared access policies, by name, as the token check needs them.</summary>
internal interface ISharedAccessPolicies
{
    /// <summary>The policy a token names (its skn), or null when the farm has none of that name.</summary>
    Task<AccessPolicyRecord?> FindAsync(string name, CancellationToken cancellationToken);
}

/// <summary>
/// The policies of the farm database, read at most once per <see cref="CacheFor"/>: every put-token
/// checks a signature, and a farm with many clients must not query the farm database for each. A
/// key renewed or a policy deleted takes effect on new tokens within that time.
/// </summary>
internal sealed class FarmSharedAccessPolicies(BrokerNode node, TimeProvider time) : ISharedAccessPolicies
{
    public static readonly TimeSpan CacheFor = TimeSpan.FromSeconds(2);

    private readonly SemaphoreSlim _refresh = new(1, 1);
    private IReadOnlyDictionary<string, AccessPolicyRecord>? _policies;
    private long _readAt;

    public async Task<AccessPolicyRecord?> FindAsync(string name, CancellationToken cancellationToken)
    {
        var policies = _policies;
        if (policies is null || time.GetElapsedTime(_readAt) > CacheFor)
        {
            await _refresh.WaitAsync(cancellationToken).ConfigureAwait(false);
            try
            {
                if (_policies is null || time.GetElapsedTime(_readAt) > CacheFor)
                {
                    var list = await node.Farm.ListAccessPoliciesAsync(cancellationToken).ConfigureAwait(false);
                    _policies = list.ToDictionary(p => p.Name, StringComparer.Ordinal);
                    _readAt = time.GetTimestamp();
                }
                policies = _policies;
            }
            finally
            {
                _refresh.Release();
            }
        }
        return policies.GetValueOrDefault(name);
    }
}
