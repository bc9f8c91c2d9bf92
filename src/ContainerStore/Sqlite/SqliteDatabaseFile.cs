using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// One SQLite database file: resolves its path from a connection string, opens configured
/// connections, and turns "cannot reach the file" failures into <see cref="StoreUnavailableException"/>
/// naming the path.
/// </summary>
internal sealed class SqliteDatabaseFile
{
    /// <summary>
    /// How long a statement waits for a lock held elsewhere (SQLite's busy_timeout, and
    /// Microsoft.Data.Sqlite's own retry loop). Its default of 30 s would stall a commit on a locked
    /// file for half a minute; "Default Timeout=N" in the connection string overrides this.
    /// </summary>
    private const int DefaultCommandTimeoutSeconds = 5;

    private readonly string _createConnectionString;
    private readonly string _existingConnectionString;
    private readonly string _pragmas;

    private SqliteDatabaseFile(string path, string createConnectionString, string existingConnectionString, int timeoutSeconds)
    {
        Path = path;
        _pragmas = SqliteSql.ConnectionPragmas(Math.Max(1, timeoutSeconds) * 1000);
        _createConnectionString = createConnectionString;
        _existingConnectionString = existingConnectionString;
    }

    /// <summary>The full path of the database file.</summary>
    public string Path { get; }

    /// <summary>
    /// Parses the connection string and makes sure the file's directory exists. Throws
    /// <see cref="StoreUnavailableException"/> for a string without a usable file path.
    /// </summary>
    public static SqliteDatabaseFile Resolve(string connectionString, string description)
    {
        var builder = Parse(connectionString, description);
        if (builder.Mode == SqliteOpenMode.Memory || string.IsNullOrWhiteSpace(builder.DataSource)
            || builder.DataSource.Trim() == ":memory:")
        {
            throw new StoreUnavailableException(
                $"The {description} connection string '{connectionString}' names no database file; Farm needs a file ('Data Source=/path/file.db').");
        }

        string path;
        try
        {
            path = System.IO.Path.GetFullPath(builder.DataSource);
        }
        catch (Exception e) when (e is ArgumentException or NotSupportedException or PathTooLongException)
        {
            throw new StoreUnavailableException($"The {description} path '{builder.DataSource}' is not a valid file path: {e.Message}", e);
        }

        if (Directory.Exists(path))
        {
            throw new StoreUnavailableException($"Cannot open the {description} '{path}': the path is a directory, not a database file.");
        }

        var directory = System.IO.Path.GetDirectoryName(path);
        if (!string.IsNullOrEmpty(directory))
        {
            try
            {
                Directory.CreateDirectory(directory);
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                throw new StoreUnavailableException(
                    $"Cannot open the {description} '{path}': its directory '{directory}' does not exist and cannot be created ({e.Message}).", e);
            }
        }

        builder.DataSource = path;
        if (!connectionString.Contains("timeout", StringComparison.OrdinalIgnoreCase))
        {
            builder.DefaultTimeout = DefaultCommandTimeoutSeconds;
        }

        // Later connections must find the file, never silently create an empty one in its place.
        var create = new SqliteConnectionStringBuilder(builder.ConnectionString) { Mode = SqliteOpenMode.ReadWriteCreate };
        var existing = new SqliteConnectionStringBuilder(builder.ConnectionString) { Mode = SqliteOpenMode.ReadWrite };
        return new SqliteDatabaseFile(path, create.ConnectionString, existing.ConnectionString, builder.DefaultTimeout);
    }

    public static SqliteConnectionStringBuilder Parse(string connectionString, string description)
    {
        ArgumentNullException.ThrowIfNull(connectionString);
        try
        {
            return new SqliteConnectionStringBuilder(connectionString);
        }
        catch (Exception e) when (e is ArgumentException or FormatException or KeyNotFoundException)
        {
            throw new StoreUnavailableException($"The {description} connection string '{connectionString}' is not a valid SQLite connection string: {e.Message}", e);
        }
    }

    /// <summary>
    /// Opens a connection with the per-connection settings applied. <paramref name="create"/> allows
    /// creating a missing file (first open only).
    /// </summary>
    public async Task<SqliteConnection> OpenAsync(bool create, CancellationToken cancellationToken)
    {
        var connection = new SqliteConnection(create ? _createConnectionString : _existingConnectionString);
        try
        {
            await connection.OpenAsync(cancellationToken).ConfigureAwait(false);
            using var pragmas = connection.CreateCommand();
            pragmas.CommandText = _pragmas;
            pragmas.ExecuteNonQuery();
            return connection;
        }
        catch (SqliteException e)
        {
            await connection.DisposeAsync().ConfigureAwait(false);
            throw Unavailable("open", e);
        }
        catch
        {
            await connection.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>Sets WAL mode; the first statement that reads the file, so it is where "not a database" shows.</summary>
    public void EnableWal(SqliteConnection connection)
    {
        try
        {
            using var command = connection.CreateCommand();
            command.CommandText = SqliteSql.EnableWal;
            var mode = command.ExecuteScalar() as string;
            if (!string.Equals(mode, "wal", StringComparison.OrdinalIgnoreCase))
            {
                throw new StoreUnavailableException($"Cannot open '{Path}' in WAL mode (the file system gave '{mode}').");
            }
        }
        catch (SqliteException e)
        {
            throw Unavailable("open", e);
        }
    }

    /// <summary>Idle pooled connections keep the file open; drop them when the store closes.</summary>
    public void ClearPools()
    {
        using var create = new SqliteConnection(_createConnectionString);
        SqliteConnection.ClearPool(create);
        using var existing = new SqliteConnection(_existingConnectionString);
        SqliteConnection.ClearPool(existing);
    }

    public StoreUnavailableException Unavailable(string action, SqliteException e) =>
        new($"Cannot {action} the SQLite database '{Path}': {Describe(e)}", e);

    /// <summary>
    /// Errors that mean the file cannot be reached or trusted (locked, gone, full, corrupt, not a
    /// database), as opposed to errors in what was asked (constraints, bad SQL).
    /// </summary>
    public static bool IsUnavailable(SqliteException e) => (e.SqliteErrorCode & 0xFF) switch
    {
        3 /* PERM */ or 5 /* BUSY */ or 6 /* LOCKED */ or 7 /* NOMEM */ or 8 /* READONLY */ or 10 /* IOERR */
            or 11 /* CORRUPT */ or 13 /* FULL */ or 14 /* CANTOPEN */ or 15 /* PROTOCOL */ or 23 /* AUTH */
            or 26 /* NOTADB */ => true,
        _ => false,
    };

    private static string Describe(SqliteException e) => (e.SqliteErrorCode & 0xFF) switch
    {
        5 or 6 => $"the file is locked by another connection or process ({e.Message})",
        14 => $"the file cannot be opened: missing, not permitted or not a regular file ({e.Message})",
        26 => $"the file is not a SQLite database ({e.Message})",
        11 => $"the file is corrupt ({e.Message})",
        13 => $"the disk is full ({e.Message})",
        8 or 3 => $"the file is read-only or not permitted ({e.Message})",
        _ => e.Message,
    };
}
