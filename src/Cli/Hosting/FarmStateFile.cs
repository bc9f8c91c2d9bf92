using System.Text.Json;
using System.Text.Json.Serialization;

namespace Farm.Cli.Hosting;

public enum FarmState
{
    Running,
    Stopped,
}

/// <summary>
/// One node as 'farm up' (or 'farm node start') recorded it in farm.json: its id, its pid (null
/// once it was stopped or killed), its address, the port it listens on (kept when it is started
/// again, so the connection string stays true), its log file (null when it ran in the foreground),
/// and the metrics and AMQP ports it was given (null: it picks a free one each time it starts).
/// </summary>
public sealed record FarmNodeEntry(int Id, int? Pid, string Address, int? Port = null, string? LogFile = null, int? MetricsPort = null, int? AmqpPort = null)
{
    /// <summary>The port to start this node on again: the recorded one, else the one in its address.</summary>
    public int ListenPort()
    {
        if (Port is { } port && port > 0)
        {
            return port;
        }

        return Uri.TryCreate(Address, UriKind.Absolute, out var uri) && uri.Port > 0
            ? uri.Port
            : throw new CliException(ExitCodes.Error, $"farm.json names no port for node {Id} (address '{Address}').");
    }
}

/// <summary>
/// The contents of &lt;data&gt;/farm.json, the local farm's record for the other commands:
/// <c>{"connection_string": "Endpoint=http://127.0.0.1:5480,http://127.0.0.1:5481", "state": "running",
/// "nodes": [{"id": 1, "pid": 1234, "address": "http://127.0.0.1:5480", "port": 5480, "log_file": "..."}, ...], ...}</c>.
/// Snake_case, stable: scripts may read it.
/// </summary>
public sealed record FarmStateRecord
{
    public required string ConnectionString { get; init; }

    public required FarmState State { get; init; }

    public required IReadOnlyList<FarmNodeEntry> Nodes { get; init; }

    public DateTimeOffset? StartedAt { get; init; }

    public DateTimeOffset? StoppedAt { get; init; }

    /// <summary>True when the farm was started with --detach (no `farm up` process watches it).</summary>
    public bool Detached { get; init; }

    /// <summary>Where the farm keeps its databases: "sqlite" (the data directory; also when absent) or "postgres".</summary>
    public string? Store { get; init; }

    /// <summary>
    /// The PostgreSQL farm database's connection string, with --store postgres: every node gets it,
    /// also one started again later. It may hold a password, so farm.json is then readable by its owner only.
    /// </summary>
    public string? FarmConnection { get; init; }

    /// <summary>The farm's MessageCacheSizePerEntity in MB (farm up --message-cache-size-per-entity), given to every node; null: the nodes' default.</summary>
    public int? MessageCacheSizePerEntityMb { get; init; }

    /// <summary>The farm's MessageCacheSizePerNode in MB (farm up --message-cache-size-per-node), given to every node; null: the nodes' default.</summary>
    public int? MessageCacheSizePerNodeMb { get; init; }

    /// <summary>The message cache sizes every node of the farm starts with.</summary>
    [JsonIgnore]
    public MessageCacheSizes MessageCache => new(MessageCacheSizePerEntityMb, MessageCacheSizePerNodeMb);

    /// <summary>The store every node of this farm runs with.</summary>
    [JsonIgnore]
    public NodeStore NodeStore => NodeStore.FromRecord(Store, FarmConnection);
}

/// <summary>Reads and writes farm.json; writes are atomic (temp file + rename).</summary>
public static class FarmStateFile
{
    public static readonly JsonSerializerOptions JsonOptions = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower,
        Converters = { new JsonStringEnumConverter(JsonNamingPolicy.SnakeCaseLower) },
        WriteIndented = true,
    };

    /// <summary>The record, or null when there is none. A corrupt file is an error that names it.</summary>
    public static FarmStateRecord? TryRead(FarmDataDirectory data)
    {
        string json;
        try
        {
            json = File.ReadAllText(data.FarmFile);
        }
        catch (Exception ex) when (ex is FileNotFoundException or DirectoryNotFoundException)
        {
            return null;
        }

        try
        {
            return JsonSerializer.Deserialize<FarmStateRecord>(json, JsonOptions)
                ?? throw new JsonException("empty document");
        }
        catch (JsonException ex)
        {
            throw new CliException(ExitCodes.Error, $"{data.FarmFile} is not a valid farm record ({ex.Message}); delete it if no farm is running there.");
        }
    }

    /// <summary>The record, or an error naming how to start a farm when there is none.</summary>
    public static FarmStateRecord Read(FarmDataDirectory data)
        => TryRead(data) ?? throw new CliException(
            ExitCodes.Unreachable,
            $"No farm on {data.Root}: start one with ./farm up --detach (or pass --data DIR / set {CliContext.HomeEnvironmentVariable}).");

    private const UnixFileMode OwnerOnly = UnixFileMode.UserRead | UnixFileMode.UserWrite;

    public static void Write(FarmDataDirectory data, FarmStateRecord record)
    {
        Directory.CreateDirectory(data.Root);
        var temp = data.FarmFile + ".tmp";
        // The farm database's connection string may carry a password: the owner's alone from the
        // start, not narrowed once written (UnixCreateMode), nor left as an earlier run's temp file had it.
        var options = new FileStreamOptions { Mode = FileMode.Create, Access = FileAccess.Write, Share = FileShare.None };
        if (record.FarmConnection is not null && !OperatingSystem.IsWindows())
        {
            options.UnixCreateMode = OwnerOnly;
            File.Delete(temp);
        }
        using (var file = new FileStream(temp, options))
        {
            JsonSerializer.Serialize(file, record, JsonOptions);
            // On disk before it replaces the old record: after a power loss farm.json is the old
            // record or this one, never an empty file (the rename can reach the disk before the data).
            file.Flush(flushToDisk: true);
        }

        File.Move(temp, data.FarmFile, overwrite: true);
    }
}
