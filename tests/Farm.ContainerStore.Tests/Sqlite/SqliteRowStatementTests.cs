using Dapper;
using Farm.ContainerStore.Sqlite;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Tests.Sqlite;

/// <summary>
/// The index-bound statements the container writer runs per row, on a real SQLite file: values land
/// as a command's would (NULL, an empty blob, text), failures throw the SqliteException a command
/// would, and a failed row leaves the statement usable for the next.
/// </summary>
public sealed class SqliteRowStatementTests : IDisposable
{
    private readonly SqliteTestDirectory _directory = new();

    private async Task<SqliteConnection> OpenAsync()
    {
        var connection = new SqliteConnection(_directory.ConnectionString("rows.db"));
        await connection.OpenAsync();
        await connection.ExecuteAsync("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, s TEXT, b BLOB)");
        return connection;
    }

    [Fact]
    public async Task BindsNullsEmptyBlobsTextAndNumbers_ByName_InAnyOrderOfTheSql()
    {
        await using var connection = await OpenAsync();
        using var insert = new SqliteRowStatement(connection, "INSERT INTO t (b, s, n, id) VALUES ($b, $s, $n, $id)", "$id", "$n", "$s", "$b");

        insert.Bind(0, 1L);
        insert.Bind(1, (long?)null);
        insert.Bind(2, (string?)null);
        insert.Bind(3, (byte[]?)null);
        Assert.Equal(1, insert.Execute());

        insert.Bind(0, 2L);
        insert.Bind(1, (long?)42);
        insert.Bind(2, "ünïcode text");
        insert.Bind(3, Array.Empty<byte>());
        Assert.Equal(1, insert.Execute());

        insert.Bind(0, 3L);
        insert.Bind(1, long.MinValue);
        insert.Bind(2, "");
        insert.Bind(3, new byte[] { 0, 1, 2, 255 });
        Assert.Equal(1, insert.Execute());

        var rows = (await connection.QueryAsync<(long Id, long? N, string? S, byte[]? B, string BlobType)>(
            "SELECT id, n, s, b, typeof(b) FROM t ORDER BY id")).ToList();
        Assert.Equal((1L, (long?)null, (string?)null, (byte[]?)null, "null"), rows[0]);
        Assert.Equal((2L, 42L, "ünïcode text"), (rows[1].Id, rows[1].N, rows[1].S));
        Assert.Equal("blob", rows[1].BlobType);
        Assert.Empty(rows[1].B!);
        Assert.Equal((3L, long.MinValue, ""), (rows[2].Id, rows[2].N, rows[2].S));
        Assert.Equal(new byte[] { 0, 1, 2, 255 }, rows[2].B);
    }

    [Fact]
    public async Task Execute_CountsTheRowsChanged_AndAFailedRowThrows_LeavingTheStatementUsable()
    {
        await using var connection = await OpenAsync();
        using var insert = new SqliteRowStatement(connection, "INSERT INTO t (id, n) VALUES ($id, $n)", "$id", "$n");
        using var delete = new SqliteRowStatement(connection, "DELETE FROM t WHERE id = $id", "$id");
        insert.Bind(0, 7L);
        insert.Bind(1, 1L);
        insert.Execute();

        // The same key again: the constraint's error, as a command would report it.
        var error = Assert.Throws<SqliteException>(() => insert.Execute());
        Assert.Equal(19, error.SqliteErrorCode);
        Assert.Contains("UNIQUE", error.Message, StringComparison.Ordinal);

        insert.Bind(0, 8L);
        Assert.Equal(1, insert.Execute());
        delete.Bind(0, 8L);
        Assert.Equal(1, delete.Execute());
        Assert.Equal(0, delete.Execute());
        Assert.Equal(new long[] { 7 }, await connection.QueryAsync<long>("SELECT id FROM t"));
    }

    [Fact]
    public async Task AParameterTheSqlDoesNotHave_IsRefusedWhenPrepared()
    {
        await using var connection = await OpenAsync();
        var error = Assert.Throws<ArgumentException>(() => new SqliteRowStatement(connection, "DELETE FROM t WHERE id = $id", "$key"));
        Assert.Contains("$key", error.Message, StringComparison.Ordinal);
    }

    public void Dispose()
    {
        SqliteConnection.ClearAllPools();
        _directory.Dispose();
    }
}
