using Farm.Broker.Containers;

namespace Farm.Broker.Node;

/// <summary>
/// A container whose lease this node holds while it is still opening and fencing the database,
/// before a <see cref="ContainerHost"/> serves it. The renewal loop renews it like a served one: an
/// open that takes longer than a lease (a busy database server, a new connection pool, a first
/// pass at start-up) keeps the container instead of losing it the moment it is registered. The
/// host, once attached, gets every renewal from then on too.
/// </summary>
/// <param name="onLost">Called with the attached host when a renewal finds the lease gone.</param>
internal sealed class TakeInProgress(long containerId, long epoch, DateTimeOffset leaseStartedAt, Action<ContainerHost> onLost)
{
    private readonly Lock _gate = new();
    private DateTimeOffset _renewedAt = leaseStartedAt;
    private ContainerHost? _host;
    private bool _refused;

    public long ContainerId => containerId;

    public long Epoch => epoch;

    /// <summary>When the latest lease that landed was asked for (the take's, or a renewal's): the host's deadline runs from there.</summary>
    public DateTimeOffset RenewedAt
    {
        get
        {
            lock (_gate)
            {
                return _renewedAt;
            }
        }
    }

    /// <summary>True once a renewal found the lease gone (another node took the container): the host must not serve.</summary>
    public bool Refused
    {
        get
        {
            lock (_gate)
            {
                return _refused;
            }
        }
    }

    /// <summary>The outcome of a renewal that started at <paramref name="startedAt"/>.</summary>
    public void OnRenewal(DateTimeOffset startedAt, bool renewed)
    {
        ContainerHost? host;
        lock (_gate)
        {
            _refused |= !renewed;
            if (renewed && startedAt > _renewedAt)
            {
                _renewedAt = startedAt;
            }
            host = _host;
        }
        if (host is null)
        {
            return;
        }
        if (renewed)
        {
            host.LeaseRenewed(startedAt);
        }
        else
        {
            onLost(host);
        }
    }

    /// <summary>The host is built: it gets the renewals that landed since its deadline was set, and every later one.</summary>
    public void Attach(ContainerHost host)
    {
        DateTimeOffset renewedAt;
        lock (_gate)
        {
            _host = host;
            renewedAt = _renewedAt;
        }
        host.LeaseRenewed(renewedAt);
    }
}
