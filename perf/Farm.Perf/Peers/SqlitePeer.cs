using System.Diagnostics;
using Microsoft.Data.Sqlite;

namespace Farm.Perf.Peers;

/// <summary>
/// The storage ceiling measured beside Farm: raw SQLite as Farm's container databases use it (WAL,
/// synchronous = FULL, the same messages table) with one writer and no broker around it. Each
/// transaction inserts a batch of 1 KB rows and deletes the batch the previous transaction
/// inserted, so in steady state every row costs one insert and one delete, and a batch shares one
/// commit (fsync) — what a queue at its best must do for a send and a complete. With a lag the
/// deletes trail the inserts by that many rows more: a queue with a backlog.
/// (RabbitMQ, the broker peer, is <see cref="RabbitMqPeer"/>.)
/// </summary>
internal static class SqlitePeer
{
    public const string Name = "raw-sqlite-insert+delete";

    /// <summary>Enough for SQLite's page cache and the WAL to reach their steady size; there is little to JIT.</summary>
    public static readonly TimeSpan Warmup = TimeSpan.FromSeconds(3);

    private const string Schema = """
        PRAGMA journal_mode = WAL;
        CREATE TABLE messages (
            entity_id       INTEGER NOT NULL,
            sequence_number INTEGER NOT NULL,
            sub_queue       INTEGER NOT NULL,
            state           INTEGER NOT NULL,
            delivery_count  INTEGER NOT NULL,
            enqueued_at_ms  INTEGER NOT NULL,
            scheduled_at_ms INTEGER NULL,
            expires_at_ms   INTEGER NULL,
            message_id      TEXT    NULL,
            dl_reason       TEXT    NULL,
            dl_description  TEXT    NULL,
            dl_source       TEXT    NULL,
            payload         BLOB    NULL,
            payload_size    INTEGER NOT NULL,
            PRIMARY KEY (entity_id, sequence_number)
        ) STRICT;
        """;

    private const string Insert = """
        INSERT INTO messages (entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms, message_id, payload, payload_size)
        VALUES (1, @seq, 0, 0, 0, @now, @id, @payload, @size)
        """;

    private const string Delete = "DELETE FROM messages WHERE entity_id = 1 AND sequence_number = @seq";

    /// <summary>As <c>SqliteSql.WalAutoCheckpointPages</c> in Farm.ContainerStore (internal there).</summary>
    private const int WalAutoCheckpointPages = 4000;

    public static PeerFigures Run(int batch, int size, int lag, TimeSpan warmup, TimeSpan duration)
    {
        var directory = Directory.CreateTempSubdirectory("farm-perf-sqlite-").FullName;
        try
        {
            var builder = new SqliteConnectionStringBuilder
            {
                DataSource = Path.Combine(directory, "peer.db"),
                Pooling = false,
            };
            using var connection = new SqliteConnection(builder.ToString());
            connection.Open();
            Execute(connection, Schema);
            Execute(connection, $"PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = {WalAutoCheckpointPages};");

            var payload = new byte[size];
            new Random(42).NextBytes(payload);
            var writer = new Writer(connection, payload, batch, lag);
            writer.RunFor(warmup);
            var written = DiskBytesWritten();
            var (rows, commits, elapsed) = writer.RunFor(duration);
            written = DiskBytesWritten() - written;
            writer.Dispose();

            var seconds = elapsed.TotalSeconds;
            return new PeerFigures(
                Name,
                MsgsPerSec: Math.Round(rows / seconds, 1),
                Messages: rows,
                DurationS: Math.Round(seconds, 3),
                CommitsPerSec: Math.Round(commits / seconds, 1),
                Settings: new PeerSettings(batch, size, "wal", "full", lag, WalAutoCheckpointPages))
            {
                DiskBytesPerMessage = written >= 0 && rows > 0 ? Math.Round((double)written / rows) : null,
            };
        }
        finally
        {
            SqliteConnection.ClearAllPools();
            Directory.Delete(directory, recursive: true);
        }
    }

    /// <summary>This process's bytes sent to the disk so far (<c>/proc/self/io</c>); -1 where there is none.</summary>
    private static long DiskBytesWritten()
    {
        const string prefix = "write_bytes:";
        try
        {
            var line = File.ReadLines("/proc/self/io").FirstOrDefault(l => l.StartsWith(prefix, StringComparison.Ordinal));
            return line is null ? -1 : long.Parse(line.AsSpan(prefix.Length).Trim(), System.Globalization.CultureInfo.InvariantCulture);
        }
        catch (IOException)
        {
            return -1;
        }
    }

    private static void Execute(SqliteConnection connection, string sql)
    {
        using var command = connection.CreateCommand();
        command.CommandText = sql;
        command.ExecuteNonQuery();
    }

    /// <summary>The single writer with its prepared statements; remembers the last batch to delete it next time.</summary>
    private sealed class Writer : IDisposable
    {
        private readonly SqliteConnection _connection;
        private readonly int _batch;
        private readonly int _lag;
        private readonly SqliteCommand _insert;
        private readonly SqliteParameter _insertSeq;
        private readonly SqliteParameter _insertNow;
        private readonly SqliteParameter _insertId;
        private readonly SqliteCommand _delete;
        private readonly SqliteParameter _deleteSeq;
        private long _next;
        private long _pendingFrom;

        public Writer(SqliteConnection connection, byte[] payload, int batch, int lag)
        {
            _connection = connection;
            _batch = batch;
            _lag = lag;
            _insert = connection.CreateCommand();
            _insert.CommandText = Insert;
            _insertSeq = _insert.Parameters.Add("@seq", SqliteType.Integer);
            _insertNow = _insert.Parameters.Add("@now", SqliteType.Integer);
            _insertId = _insert.Parameters.Add("@id", SqliteType.Text);
            _insert.Parameters.Add("@payload", SqliteType.Blob).Value = payload;
            _insert.Parameters.Add("@size", SqliteType.Integer).Value = payload.Length;
            _delete = connection.CreateCommand();
            _delete.CommandText = Delete;
            _deleteSeq = _delete.Parameters.Add("@seq", SqliteType.Integer);
        }

        /// <summary>Runs transactions for <paramref name="duration"/>; returns rows inserted (and deleted), commits, time taken.</summary>
        public (long Rows, long Commits, TimeSpan Elapsed) RunFor(TimeSpan duration)
        {
            var clock = Stopwatch.StartNew();
            long rows = 0, commits = 0;
            while (clock.Elapsed < duration)
            {
                using var transaction = _connection.BeginTransaction();
                _insert.Transaction = transaction;
                _delete.Transaction = transaction;
                _insertNow.Value = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds();
                for (var i = 0; i < _batch; i++)
                {
                    _insertSeq.Value = _next;
                    _insertId.Value = _next.ToString(System.Globalization.CultureInfo.InvariantCulture);
                    _insert.ExecuteNonQuery();
                    _next++;
                }

                var keepFrom = Math.Max(_next - _batch - _lag, 0);
                for (var seq = _pendingFrom; seq < keepFrom; seq++)
                {
                    _deleteSeq.Value = seq;
                    _delete.ExecuteNonQuery();
                }

                transaction.Commit();
                _pendingFrom = Math.Max(_pendingFrom, keepFrom);
                rows += _batch;
                commits++;
            }

            return (rows, commits, clock.Elapsed);
        }

        public void Dispose()
        {
            _insert.Dispose();
            _delete.Dispose();
        }
    }
}
