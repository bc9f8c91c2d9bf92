using Farm.Broker.Node;
using Microsoft.Data.Sqlite;

namespace Farm.Broker.Tests;

/// <summary>
/// Holds a container database's SQLite write lock from outside the broker (BEGIN IMMEDIATE on a
/// connection of the test's own), as another process could: the broker's commits wait behind it,
/// and fail once it outlasts their busy timeout. Tests drive commit races with it.
/// </summary>
internal static class ContainerWriteLock
{
    public static async Task<SqliteConnection> HoldAsync(BrokerNode node, long containerId = 1)
    {
        var record = await node.Farm.GetContainerAsync(containerId) ?? throw new InvalidOperationException($"no container {containerId}");
        var builder = new SqliteConnectionStringBuilder(record.ConnectionString) { Mode = SqliteOpenMode.ReadWrite, Pooling = false };
        var connection = new SqliteConnection(builder.ConnectionString);
        await connection.OpenAsync();
        using var begin = connection.CreateCommand();
        begin.CommandText = "BEGIN IMMEDIATE";
        await begin.ExecuteNonQueryAsync();
        return connection;
    }

    public static async Task ReleaseAsync(SqliteConnection connection)
    {
        using (var rollback = connection.CreateCommand())
        {
            rollback.CommandText = "ROLLBACK";
            await rollback.ExecuteNonQueryAsync();
        }
        await connection.DisposeAsync();
    }
}
