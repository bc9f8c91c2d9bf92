using System.Globalization;
using System.Security.Cryptography;
using Farm.Testing;
using Npgsql;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A PostgreSQL server of the test's own, as ./test.sh starts one: a fresh data directory in a
/// temp dir (named after the test's pid, so a later run can clean up after a crashed one), fsync
/// on, password auth, run as the postgres user when we are root. It listens on 127.0.0.1 (the
/// test's own checks) and on the addresses given (where the nodes reach it), and accepts password
/// logins from <c>allowedNetwork</c>. Disposing stops it and deletes the directory.
/// </summary>
internal sealed class ThrowawayPostgres : IAsyncDisposable
{
    private const string DirectoryPrefix = "farm-partition-pg-";
    private static readonly TimeSpan CommandTimeout = TimeSpan.FromSeconds(90);

    private readonly string _directory;
    private readonly string _bin;
    private readonly string[] _runAs;
    private bool _started;
    private string _startOptions = "";

    private ThrowawayPostgres(string directory, string bin, string[] runAs, int port, string password)
    {
        _directory = directory;
        _bin = bin;
        _runAs = runAs;
        Port = port;
        Password = password;
    }

    public int Port { get; }

    public string Password { get; }

    /// <summary>The server's log, for failure messages.</summary>
    public string LogFile => Path.Combine(_directory, "server.log");

    public static async Task<ThrowawayPostgres> StartAsync(IReadOnlyList<string> listenAddresses, string allowedNetwork, Action<string> log)
    {
        await RemoveLeftoversAsync(log);
        var bin = FindBinaries() ?? throw new InvalidOperationException(
            "No PostgreSQL server binaries (initdb) on the PATH or under /usr/lib/postgresql/*/bin; install PostgreSQL (./test.sh does).");
        string[] runAs = Environment.UserName == "root" ? ["runuser", "-u", "postgres", "--"] : [];

        var directory = Directory.CreateTempSubdirectory($"{DirectoryPrefix}{Environment.ProcessId}-").FullName;
        var password = Convert.ToHexString(RandomNumberGenerator.GetBytes(12));
        var server = new ThrowawayPostgres(directory, bin, runAs, FreePorts.Pick(), password);
        try
        {
            await server.InitAndStartAsync(listenAddresses, allowedNetwork);
            return server;
        }
        catch
        {
            await server.DisposeAsync();
            throw;
        }
    }

    private async Task InitAndStartAsync(IReadOnlyList<string> listenAddresses, string allowedNetwork)
    {
        var data = Path.Combine(_directory, "data");
        var socket = Path.Combine(_directory, "socket");
        var passwordFile = Path.Combine(_directory, "password");
        Directory.CreateDirectory(data);
        Directory.CreateDirectory(socket);
        await File.WriteAllTextAsync(passwordFile, Password + "\n");
        if (_runAs.Length > 0)
        {
            await RunAsync("chmod", "755", _directory);
            await RunAsync("chown", "-R", "postgres:", _directory);
        }

        await RunAsync([.. _runAs, Path.Combine(_bin, "initdb"), "-D", data, "-U", "postgres", $"--pwfile={passwordFile}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale"]);
        // The nodes log in over the test network; initdb allowed only loopback.
        await File.AppendAllTextAsync(Path.Combine(data, "pg_hba.conf"), $"host all all {allowedNetwork} scram-sha-256\n");

        // fsync stays on: the test checks that nothing acknowledged is lost.
        var options = string.Join(' ',
            $"-c listen_addresses={string.Join(',', ["127.0.0.1", .. listenAddresses])}",
            $"-c port={Port.ToString(CultureInfo.InvariantCulture)}",
            $"-c unix_socket_directories={socket}",
            "-c fsync=on",
            "-c max_connections=300");
        _startOptions = options;
        await StartAgainAsync();
    }

    /// <summary>Stops the server as a crash would (immediate: no checkpoint), keeping its data.</summary>
    public async Task StopAsync()
    {
        await RunAsync([.. _runAs, Path.Combine(_bin, "pg_ctl"), "-D", Path.Combine(_directory, "data"), "-m", "immediate", "-w", "stop"]);
        _started = false;
    }

    /// <summary>Starts the stopped server again on the same port and data (it recovers what it had).</summary>
    public async Task StartAgainAsync()
    {
        await RunAsync([.. _runAs, Path.Combine(_bin, "pg_ctl"), "-D", Path.Combine(_directory, "data"), "-l", LogFile, "-w", "-t", "60", "-o", _startOptions, "start"]);
        _started = true;
    }

    /// <summary>A connection string for <paramref name="database"/> on <paramref name="host"/>.</summary>
    public string ConnectionString(string host, string database) => new NpgsqlConnectionStringBuilder
    {
        Host = host,
        Port = Port,
        Username = "postgres",
        Password = Password,
        Database = database,
    }.ConnectionString;

    /// <summary>The test's own connection (127.0.0.1, no pooling: nothing lingers when the server stops).</summary>
    public string LocalConnectionString(string database) =>
        new NpgsqlConnectionStringBuilder(ConnectionString("127.0.0.1", database)) { Pooling = false }.ConnectionString;

    public async Task CreateDatabaseAsync(string name)
    {
        await using var connection = new NpgsqlConnection(LocalConnectionString("postgres"));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand($"CREATE DATABASE \"{name}\"", connection);
        await command.ExecuteNonQueryAsync();
    }

    public async ValueTask DisposeAsync()
    {
        if (_started)
        {
            await TryRunAsync([.. _runAs, Path.Combine(_bin, "pg_ctl"), "-D", Path.Combine(_directory, "data"), "-m", "immediate", "-w", "stop"]);
            _started = false;
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // A server still shutting down; the next run's leftover sweep gets it.
        }
    }

    /// <summary>Servers and directories of earlier runs whose test process is gone.</summary>
    private static async Task RemoveLeftoversAsync(Action<string> log)
    {
        var bin = FindBinaries();
        foreach (var directory in Directory.EnumerateDirectories(Path.GetTempPath(), DirectoryPrefix + "*"))
        {
            var pidText = Path.GetFileName(directory)[DirectoryPrefix.Length..].Split('-')[0];
            if (!int.TryParse(pidText, NumberStyles.Integer, CultureInfo.InvariantCulture, out var pid) || Directory.Exists($"/proc/{pid}"))
            {
                continue;
            }
            var data = Path.Combine(directory, "data");
            if (bin is not null && File.Exists(Path.Combine(data, "postmaster.pid")))
            {
                string[] runAs = Environment.UserName == "root" ? ["runuser", "-u", "postgres", "--"] : [];
                await TryRunAsync([.. runAs, Path.Combine(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"]);
            }
            try
            {
                Directory.Delete(directory, recursive: true);
                log($"removed PostgreSQL directory {directory} left by an earlier run");
            }
            catch (IOException)
            {
                // Leave it; it does not block this run.
            }
        }
    }

    private static string? FindBinaries()
    {
        var onPath = (Environment.GetEnvironmentVariable("PATH") ?? "").Split(':', StringSplitOptions.RemoveEmptyEntries)
            .Select(d => Path.Combine(d, "initdb")).FirstOrDefault(File.Exists);
        // Debian keeps the server's binaries off the PATH; take the newest installed version.
        var initdb = onPath ?? (Directory.Exists("/usr/lib/postgresql")
            ? Directory.EnumerateDirectories("/usr/lib/postgresql")
                .Select(d => Path.Combine(d, "bin", "initdb"))
                .Where(File.Exists)
                .OrderBy(p => int.TryParse(Path.GetFileName(Path.GetDirectoryName(Path.GetDirectoryName(p))), NumberStyles.Integer, CultureInfo.InvariantCulture, out var v) ? v : 0)
                .LastOrDefault()
            : null);
        return initdb is null ? null : Path.GetDirectoryName(new FileInfo(initdb).ResolveLinkTarget(returnFinalTarget: true)?.FullName ?? initdb);
    }

    private static async Task RunAsync(params string[] command)
    {
        var result = await ProcessRunner.RunAsync(command[0], command[1..], CommandTimeout, workingDirectory: Path.GetTempPath());
        if (result.ExitCode != 0)
        {
            throw new InvalidOperationException($"`{string.Join(' ', command)}` failed: {result}");
        }
    }

    private static async Task TryRunAsync(params string[] command)
    {
        try
        {
            await ProcessRunner.RunAsync(command[0], command[1..], CommandTimeout, workingDirectory: Path.GetTempPath());
        }
        catch (Exception e) when (e is TimeoutException or InvalidOperationException or System.ComponentModel.Win32Exception)
        {
            // Cleanup goes on.
        }
    }
}
