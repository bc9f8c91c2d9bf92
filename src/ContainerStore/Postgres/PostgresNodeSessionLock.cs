using Dapper;
using Farm.ContainerStore.FarmDatabase;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// A node's session lock on PostgreSQL (<see cref="INodeSessionLock"/>): a session-level advisory
/// lock on (Farm's key space, node id) in the farm database, held on a connection of its own outside
/// the pool, named for the node (application_name) so a probe can tell whose session holds a lock.
/// The server ends a session as soon as its client's socket closes, so a killed node's lock is free
/// within moments, on any host. The same session probes the other nodes' locks (a probe that finds
/// one free holds it until the caller lets go).
/// </summary>
internal sealed class PostgresNodeSessionLock(PostgresDatabase database, long nodeId) : INodeSessionLock
{
    private readonly SemaphoreSlim _gate = new(1, 1);
    private NpgsqlConnection? _session;
    private DateTimeOffset? _heldSince;

    public async Task<DateTimeOffset?> EnsureHeldAsync(TimeProvider clock, CancellationToken cancellationToken = default)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_session is not null && _heldSince is not null)
            {
                try
                {
                    await _session.ExecuteScalarAsync<int>(new CommandDefinition(PostgresSql.NodeLocks.Ping, cancellationToken: cancellationToken)).ConfigureAwait(false);
                    return _heldSince;
                }
                catch (Exception e) when (e is NpgsqlException or InvalidOperationException or TimeoutException)
                {
                    // The session is gone (server restart, broken connection), and the lock with it: take it again.
                    await DropSessionAsync().ConfigureAwait(false);
                }
            }
            try
            {
                _session ??= await OpenSessionAsync(cancellationToken).ConfigureAwait(false);
                if (await TryLockAsync(_session, nodeId, cancellationToken).ConfigureAwait(false))
                {
                    _heldSince = clock.GetUtcNow();
                }
                return _heldSince;
            }
            catch (Exception e) when (e is NpgsqlException or InvalidOperationException or TimeoutException or StoreUnavailableException)
            {
                await DropSessionAsync().ConfigureAwait(false);
                return null;
            }
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<NodeLockProbe> ProbeAsync(long otherNodeId, CancellationToken cancellationToken = default)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        var release = false;
        try
        {
            if (_session is null || _heldSince is null || otherNodeId == nodeId)
            {
                // Only a session that holds this node's own lock probes others: a probe that takes a
                // lock must not leave it on a session nobody checks.
                return NodeLockProbe.Unknown;
            }
            var holder = await _session.ExecuteScalarAsync<string?>(new CommandDefinition(
                PostgresSql.NodeLocks.TryLockOrNameHolder, new { PostgresSql.NodeLocks.Space, NodeId = otherNodeId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            if (holder is null)
            {
                release = true;
                return new NodeLockProbe(NodeLockHolder.Nobody, new Hold(this, otherNodeId));
            }
            return new NodeLockProbe(holder == PostgresSql.NodeLocks.SessionName(otherNodeId) ? NodeLockHolder.ItsNode : NodeLockHolder.AnotherSession);
        }
        catch (Exception e) when (e is NpgsqlException or InvalidOperationException or TimeoutException)
        {
            await DropSessionAsync().ConfigureAwait(false);
            return NodeLockProbe.Unknown;
        }
        finally
        {
            if (!release)
            {
                _gate.Release();
            }
        }
    }

    public async Task<IReadOnlySet<long>?> ListHeldAsync(CancellationToken cancellationToken = default)
    {
        // A pooled connection, not the session: reading pg_locks takes nothing, and the session's
        // gate stays free for the ownership pass's probes.
        try
        {
            await using var connection = await database.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
            var held = await connection.QueryAsync<long>(new CommandDefinition(
                PostgresSql.NodeLocks.Held, new { PostgresSql.NodeLocks.Space }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return held.ToHashSet();
        }
        catch (Exception e) when (e is NpgsqlException or InvalidOperationException or TimeoutException or StoreUnavailableException)
        {
            return null;
        }
    }

    /// <summary>A probe's hold on another node's lock; the gate stays taken until it is let go, so nothing else uses the session meanwhile.</summary>
    private sealed class Hold(PostgresNodeSessionLock owner, long otherNodeId) : IAsyncDisposable
    {
        private int _disposed;

        public async ValueTask DisposeAsync()
        {
            if (Interlocked.Exchange(ref _disposed, 1) != 0)
            {
                return;
            }
            try
            {
                if (owner._session is { } session)
                {
                    await session.ExecuteScalarAsync<bool>(new CommandDefinition(
                        PostgresSql.NodeLocks.Unlock, new { PostgresSql.NodeLocks.Space, NodeId = otherNodeId })).ConfigureAwait(false);
                }
            }
            catch (Exception e) when (e is NpgsqlException or InvalidOperationException or TimeoutException)
            {
                // The session is gone, and every lock it held with it.
                await owner.DropSessionAsync().ConfigureAwait(false);
            }
            finally
            {
                owner._gate.Release();
            }
        }
    }

    private static async Task<bool> TryLockAsync(NpgsqlConnection session, long id, CancellationToken cancellationToken) =>
        await session.ExecuteScalarAsync<bool>(new CommandDefinition(
            PostgresSql.NodeLocks.TryLock, new { PostgresSql.NodeLocks.Space, NodeId = id }, cancellationToken: cancellationToken)).ConfigureAwait(false);

    private async Task<NpgsqlConnection> OpenSessionAsync(CancellationToken cancellationToken)
    {
        var connection = database.CreateUnpooledConnection(PostgresSql.NodeLocks.SessionName(nodeId));
        try
        {
            await connection.OpenAsync(cancellationToken).ConfigureAwait(false);
            return connection;
        }
        catch
        {
            await connection.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    private async Task DropSessionAsync()
    {
        _heldSince = null;
        if (_session is { } session)
        {
            _session = null;
            await session.DisposeAsync().ConfigureAwait(false);
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _gate.WaitAsync().ConfigureAwait(false);
        try
        {
            await DropSessionAsync().ConfigureAwait(false);
        }
        finally
        {
            _gate.Release();
        }
    }
}
