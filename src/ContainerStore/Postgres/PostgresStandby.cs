namespace Farm.ContainerStore.Postgres;

/// <summary>
/// Container databases this process may take at short notice, each kept with one open connection,
/// so a take starts on a warm connection instead of a new server process to fork and log in to
/// while its clients wait: on the 2-core reference machine the open was 80-1,200 ms of a take in a
/// PostgreSQL SIGKILL failover, most of what the failover waited for (perf/README.md, "Session 63").
/// Two ways in: a container this process released (<see cref="Keep"/>: hand-backs and failovers
/// move containers among the same few nodes), and one served elsewhere that the ownership pass
/// names (<see cref="Prepare"/>: a survivor takes a dead node's containers).
/// </summary>
/// <remarks>
/// A released database's pool is emptied at once and one connection opened again, so each kept
/// database costs its server one idle session, and at most <see cref="Capacity"/> are kept per
/// process (a release pushes out the one kept longest; a prepare pushes out nothing): three nodes
/// with six containers keep at most twelve, within a default server's 100 connections beside their
/// pools. A kept connection the server has since ended (a restart, a dropped database) fails its
/// first use; <see cref="PostgresContainerDatabase.OpenAsync"/> then opens the database afresh.
/// </remarks>
internal static class PostgresStandby
{
    /// <summary>Most databases kept, each with one idle connection.</summary>
    public const int Capacity = 32;

    private static readonly Lock Gate = new();

    /// <summary>Set once the process stops: a database released from then on is closed, not kept.</summary>
    private static bool _stopped;

    /// <summary>Kept databases by connection string, oldest first.</summary>
    private static readonly List<(string ConnectionString, PostgresDatabase Database)> Kept = [];

    /// <summary>Databases <see cref="Prepare"/> is opening now.</summary>
    private static readonly HashSet<string> Preparing = [];

    /// <summary>When a prepare last failed, by connection string (<see cref="Environment.TickCount64"/>): not tried again for <see cref="RetryPrepareAfter"/>.</summary>
    private static readonly Dictionary<string, long> PrepareFailedAt = [];

    /// <summary>A database that could not be opened is not tried again sooner: a server that is down is not asked twice a second.</summary>
    private static readonly TimeSpan RetryPrepareAfter = TimeSpan.FromSeconds(30);

    /// <summary>
    /// Opens a database served elsewhere and keeps it with one connection, in the background, unless
    /// it is kept or being opened already, or <see cref="Capacity"/> are kept (a prepare never
    /// pushes another out: a farm of more containers would otherwise open and close them in turn).
    /// Never creates the database, and never throws.
    /// </summary>
    public static void Prepare(string connectionString)
    {
        lock (Gate)
        {
            if (_stopped || Kept.Count + Preparing.Count >= Capacity || Preparing.Contains(connectionString)
                || Kept.Exists(k => k.ConnectionString == connectionString)
                || (PrepareFailedAt.TryGetValue(connectionString, out var failedAt) && Environment.TickCount64 - failedAt < RetryPrepareAfter.TotalMilliseconds))
            {
                return;
            }
            Preparing.Add(connectionString);
        }
        _ = PrepareAsync(connectionString);
    }

    private static async Task PrepareAsync(string connectionString)
    {
        PostgresDatabase? database;
        try
        {
            database = PostgresDatabase.Resolve(connectionString, "container database");
        }
        catch (StoreUnavailableException)
        {
            database = null;
        }
        if (database is not null && !await WarmAsync(database).ConfigureAwait(false))
        {
            // Nothing lost: a take opens it afresh.
            database = null;
        }

        var unused = database;
        lock (Gate)
        {
            Preparing.Remove(connectionString);
            if (database is null)
            {
                PrepareFailedAt[connectionString] = Environment.TickCount64;
            }
            else
            {
                PrepareFailedAt.Remove(connectionString);
                if (!_stopped && Kept.Count < Capacity && !Kept.Exists(k => k.ConnectionString == connectionString))
                {
                    Kept.Add((connectionString, database));
                    unused = null;
                }
            }
        }
        if (unused is not null)
        {
            await unused.DisposeAsync().ConfigureAwait(false);
        }
    }

    /// <summary>The kept database for <paramref name="connectionString"/>, no longer kept; null when none is.</summary>
    public static PostgresDatabase? Take(string connectionString)
    {
        lock (Gate)
        {
            var index = Kept.FindIndex(k => k.ConnectionString == connectionString);
            if (index < 0)
            {
                return null;
            }
            var database = Kept[index].Database;
            Kept.RemoveAt(index);
            return database;
        }
    }

    /// <summary>
    /// Keeps a database a container no longer uses: its pool emptied, then one connection opened
    /// and returned to it. Runs in the background of the release; a database that cannot be
    /// reached is closed instead.
    /// </summary>
    public static void Keep(string connectionString, PostgresDatabase database) => _ = KeepAsync(connectionString, database);

    private static async Task KeepAsync(string connectionString, PostgresDatabase database)
    {
        if (Volatile.Read(ref _stopped))
        {
            await database.DisposeAsync().ConfigureAwait(false);
            return;
        }
        database.ClearIdleConnections();
        if (!await WarmAsync(database).ConfigureAwait(false))
        {
            // Nothing lost: the next take of this container opens it afresh.
            return;
        }

        PostgresDatabase? replaced = null;
        PostgresDatabase? dropped = null;
        lock (Gate)
        {
            if (_stopped)
            {
                dropped = database;
            }
            else
            {
                replaced = KeepLocked(connectionString, database, out dropped);
            }
        }
        if (replaced is not null)
        {
            await replaced.DisposeAsync().ConfigureAwait(false);
        }
        if (dropped is not null)
        {
            await dropped.DisposeAsync().ConfigureAwait(false);
        }
    }

    /// <summary>Opens one connection and leaves it idle in the pool; when that fails, closes the database and returns false.</summary>
    private static async Task<bool> WarmAsync(PostgresDatabase database)
    {
        try
        {
            using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
            await using (await database.OpenConnectionAsync(timeout.Token).ConfigureAwait(false))
            {
            }
            return true;
        }
        catch (Exception)
        {
            await database.DisposeAsync().ConfigureAwait(false);
            return false;
        }
    }

    /// <summary>Keeps <paramref name="database"/>; returns the one it replaces, and the oldest one it pushed out in <paramref name="dropped"/>.</summary>
    private static PostgresDatabase? KeepLocked(string connectionString, PostgresDatabase database, out PostgresDatabase? dropped)
    {
        PostgresDatabase? replaced = null;
        dropped = null;
        var index = Kept.FindIndex(k => k.ConnectionString == connectionString);
        if (index >= 0)
        {
            replaced = Kept[index].Database;
            Kept.RemoveAt(index);
        }
        Kept.Add((connectionString, database));
        if (Kept.Count > Capacity)
        {
            dropped = Kept[0].Database;
            Kept.RemoveAt(0);
        }
        return replaced;
    }

    /// <summary>The process stops: closes every kept database, and keeps none released from now on.</summary>
    public static void Stop()
    {
        List<PostgresDatabase> closing;
        lock (Gate)
        {
            Volatile.Write(ref _stopped, true);
            closing = [.. Kept.Select(k => k.Database)];
            Kept.Clear();
        }
        foreach (var database in closing)
        {
            // Disposing closes the idle connection at once, with a Terminate message the server expects.
            _ = database.DisposeAsync().AsTask();
        }
    }

    /// <summary>Whether a database is kept for <paramref name="connectionString"/> (for tests).</summary>
    internal static bool Holds(string connectionString)
    {
        lock (Gate)
        {
            return Kept.Exists(k => k.ConnectionString == connectionString);
        }
    }

    /// <summary>Whether a <see cref="Prepare"/> of <paramref name="connectionString"/> is under way (for tests).</summary>
    internal static bool IsPreparing(string connectionString)
    {
        lock (Gate)
        {
            return Preparing.Contains(connectionString);
        }
    }

    /// <summary>Keeps released databases again after <see cref="Stop"/> (for tests, which share one process).</summary>
    internal static void ResumeForTests()
    {
        lock (Gate)
        {
            Volatile.Write(ref _stopped, false);
        }
    }
}
