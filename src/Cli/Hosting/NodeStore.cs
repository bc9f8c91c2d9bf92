using System.Data.Common;

namespace Farm.Cli.Hosting;

/// <summary>
/// Where a farm keeps its databases, as every node is told on its command line: SQLite in the data
/// directory (the default; no arguments), or PostgreSQL (<c>--store postgres --farm-connection CS</c>,
/// the farm database on a server; container databases are created next to it).
/// </summary>
public sealed record NodeStore(string Name, string? FarmConnection)
{
    public const string Sqlite = "sqlite";
    public const string Postgres = "postgres";

    public static NodeStore Default { get; } = new(Sqlite, null);

    public bool IsPostgres => Name == Postgres;

    /// <summary>What `farm up --store S [--farm-connection CS]` asks for, or exit 2 naming what is wrong.</summary>
    public static NodeStore FromOptions(string? store, string? farmConnection)
    {
        var name = (store ?? Sqlite).Trim().ToLowerInvariant();
        if (name is not (Sqlite or Postgres))
        {
            throw new CliException(ExitCodes.BadInput, $"--store must be {Sqlite} or {Postgres}, not '{store}'.");
        }

        if (name == Sqlite)
        {
            return string.IsNullOrWhiteSpace(farmConnection)
                ? Default
                : throw new CliException(ExitCodes.BadInput, $"--farm-connection is for --store {Postgres}; a {Sqlite} farm keeps its farm database in the data directory.");
        }

        if (string.IsNullOrWhiteSpace(farmConnection))
        {
            throw new CliException(
                ExitCodes.BadInput,
                $"--store {Postgres} needs --farm-connection with the farm database's connection string (Host=...;Port=...;Database=...;Username=...;Password=...); the database must exist.");
        }

        try
        {
            var builder = new DbConnectionStringBuilder { ConnectionString = farmConnection };
            if (!builder.ContainsKey("Database") && !builder.ContainsKey("DB"))
            {
                throw new CliException(ExitCodes.BadInput, "--farm-connection names no Database; name the farm database (Database=...), which must exist.");
            }
        }
        catch (ArgumentException ex)
        {
            throw new CliException(ExitCodes.BadInput, $"--farm-connection is not a valid connection string ({ex.Message.ReplaceLineEndings(" ")}); use Host=...;Database=...;Username=...;Password=....");
        }

        return new NodeStore(Postgres, farmConnection.Trim());
    }

    /// <summary>The store farm.json records; a record without one is a SQLite farm.</summary>
    public static NodeStore FromRecord(string? store, string? farmConnection)
        => string.Equals(store, Postgres, StringComparison.OrdinalIgnoreCase) && !string.IsNullOrWhiteSpace(farmConnection)
            ? new NodeStore(Postgres, farmConnection)
            : Default;

    /// <summary>The farm database's connection string without its password, for printing.</summary>
    public string? SafeFarmConnection()
    {
        if (FarmConnection is null)
        {
            return null;
        }

        try
        {
            var builder = new DbConnectionStringBuilder { ConnectionString = FarmConnection };
            foreach (var key in new[] { "Password", "Pwd" })
            {
                if (builder.ContainsKey(key))
                {
                    builder[key] = "***";
                }
            }

            return builder.ConnectionString;
        }
        catch (ArgumentException)
        {
            return "(unreadable connection string)";
        }
    }

    /// <summary>One line for status: "sqlite" or "postgres (host=...;database=...;password=***)".</summary>
    public string Describe() => IsPostgres ? $"{Name} ({SafeFarmConnection()})" : Name;
}
