using Microsoft.Data.Sqlite;
using SQLitePCL;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// One prepared write statement run once per row of a group commit, bound by parameter index
/// through SQLitePCLRaw (the library under Microsoft.Data.Sqlite). A <see cref="SqliteCommand"/>
/// looks each parameter up by name on every execution (a linear strncmp scan of the statement's
/// names, after converting the name to UTF-8) and builds a data reader per row: in a profile of a
/// node fanning out to 1,000 subscriptions that was about a tenth of its CPU. Names are resolved to
/// indexes once here. Runs on the writer's connection, inside the transaction it began; failures
/// throw the <see cref="SqliteException"/> a command would.
/// </summary>
internal sealed class SqliteRowStatement : IDisposable
{
    private readonly sqlite3 _db;
    private readonly sqlite3_stmt _statement;

    public SqliteRowStatement(SqliteConnection connection, string sql, params string[] parameterNames)
    {
        _db = connection.Handle ?? throw new InvalidOperationException("The connection is not open.");
        var rc = raw.sqlite3_prepare_v2(_db, sql, out _statement);
        SqliteException.ThrowExceptionForRC(rc, _db);
        Indexes = new int[parameterNames.Length];
        for (var i = 0; i < parameterNames.Length; i++)
        {
            Indexes[i] = raw.sqlite3_bind_parameter_index(_statement, parameterNames[i]);
            if (Indexes[i] == 0)
            {
                _statement.Dispose();
                throw new ArgumentException($"The statement has no parameter {parameterNames[i]}: {sql}", nameof(parameterNames));
            }
        }
    }

    /// <summary>The statement's index of each parameter, in the order they were named.</summary>
    private int[] Indexes { get; }

    public void Bind(int parameter, long value) => Check(raw.sqlite3_bind_int64(_statement, Indexes[parameter], value));

    public void Bind(int parameter, long? value) =>
        Check(value is { } v ? raw.sqlite3_bind_int64(_statement, Indexes[parameter], v) : raw.sqlite3_bind_null(_statement, Indexes[parameter]));

    public void Bind(int parameter, string? value) =>
        Check(value is null ? raw.sqlite3_bind_null(_statement, Indexes[parameter]) : raw.sqlite3_bind_text(_statement, Indexes[parameter], value));

    /// <summary>Null binds NULL; an empty array an empty blob (a null pointer would bind NULL).</summary>
    public void Bind(int parameter, byte[]? value) => Check(value switch
    {
        null => raw.sqlite3_bind_null(_statement, Indexes[parameter]),
        { Length: 0 } => raw.sqlite3_bind_zeroblob(_statement, Indexes[parameter], 0),
        _ => raw.sqlite3_bind_blob(_statement, Indexes[parameter], value),
    });

    /// <summary>Runs the statement with the values bound; returns the rows it changed.</summary>
    public int Execute()
    {
        try
        {
            var rc = raw.sqlite3_step(_statement);
            if (rc != raw.SQLITE_DONE && rc != raw.SQLITE_ROW)
            {
                SqliteException.ThrowExceptionForRC(rc, _db);
            }
            return raw.sqlite3_changes(_db);
        }
        finally
        {
            raw.sqlite3_reset(_statement);
        }
    }

    private void Check(int rc)
    {
        if (rc != raw.SQLITE_OK)
        {
            SqliteException.ThrowExceptionForRC(rc, _db);
        }
    }

    public void Dispose() => _statement.Dispose();
}
