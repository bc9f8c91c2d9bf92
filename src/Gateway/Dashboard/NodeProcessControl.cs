using System.Diagnostics;
using System.Net;
using Farm.Broker.Node;

namespace Farm.Gateway.Dashboard;

/// <summary>
/// Reaches node processes for the dashboard. Acting on one (kill, pause, resume, stop, start) runs
/// the `farm` CLI that started the farm (<c>dotnet farm.dll node VERB N --data DIR</c>), so the
/// page does exactly what `farm node` does: the same pid from farm.json, the same signals, the same
/// farm.json update. A node started some other way (in a container, by hand) has no CLI to call:
/// the page says so and keeps the farm-level controls (drain, move), which work over gRPC anywhere.
/// A node's process state is read from /proc where the process is on this machine.
/// </summary>
internal sealed class NodeProcessControl(DashboardOptions options, NodeOptions node)
{
    /// <summary>The verbs of `farm node` the page may run.</summary>
    public static readonly IReadOnlySet<string> Verbs = new HashSet<string>(StringComparer.Ordinal) { "kill", "pause", "resume", "stop", "start" };

    /// <summary>A start waits for the node to serve; the CLI's own limits are shorter than this.</summary>
    private static readonly TimeSpan CommandTimeout = TimeSpan.FromSeconds(150);

    public bool Available => options.FarmCli is not null && File.Exists(options.FarmCli);

    public string Note => Available
        ? "Kill, pause, resume, stop and start act on the node processes through the farm CLI that started them (farm node VERB N)."
        : "This node was not started by 'farm up', so it cannot reach node processes: kill or pause them where they run "
          + "(farm node kill N on the host, or the container engine: docker kill / podman kill). Drain and move still work.";

    /// <summary>Runs <c>farm node VERB N</c>; returns its one-line answer or throws <see cref="DashboardException"/> with its error line.</summary>
    public async Task<string> RunAsync(string verb, long nodeId, CancellationToken cancellationToken)
    {
        if (!Verbs.Contains(verb))
        {
            throw new DashboardException(HttpStatusCode.BadRequest, $"'{verb}' is not a node action; use one of {string.Join(", ", Verbs)}, drain.");
        }
        if (!Available)
        {
            throw new DashboardException(HttpStatusCode.Conflict, Note);
        }

        var start = new ProcessStartInfo(DotnetHost())
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
        };
        foreach (var argument in new[] { options.FarmCli!, "node", verb, nodeId.ToString(System.Globalization.CultureInfo.InvariantCulture), "--data", node.DataDirectory })
        {
            start.ArgumentList.Add(argument);
        }
        // The CLI must not think it runs inside a farm of the caller's choosing.
        start.Environment.Remove("FARM_CONNECTION");

        using var process = Process.Start(start) ?? throw new DashboardException(HttpStatusCode.InternalServerError, "Could not run the farm CLI.");
        process.StandardInput.Close();
        var stdout = process.StandardOutput.ReadToEndAsync(cancellationToken);
        var stderr = process.StandardError.ReadToEndAsync(cancellationToken);
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(CommandTimeout);
        try
        {
            await process.WaitForExitAsync(timeout.Token);
        }
        catch (OperationCanceledException)
        {
            process.Kill(entireProcessTree: true);
            throw new DashboardException(HttpStatusCode.GatewayTimeout, $"farm node {verb} {nodeId} did not finish within {CommandTimeout.TotalSeconds:0} s.");
        }
        var output = (await stdout).Trim();
        var error = (await stderr).Trim();
        if (process.ExitCode != 0)
        {
            var line = LastLine(error) ?? LastLine(output) ?? $"exit code {process.ExitCode}";
            throw new DashboardException(process.ExitCode == 2 ? HttpStatusCode.BadRequest : HttpStatusCode.Conflict, line);
        }
        return LastLine(output) ?? $"node {nodeId}: {verb} done";
    }

    /// <summary>running, paused or exited for a process on this machine; unknown for one elsewhere.</summary>
    public static string StateOf(int processId, string nodeAddress, string ourAddress)
    {
        if (processId == Environment.ProcessId)
        {
            return "running";
        }
        if (processId <= 0 || !OperatingSystem.IsLinux() || !SameMachine(nodeAddress, ourAddress))
        {
            return "unknown";
        }
        string stat;
        try
        {
            stat = File.ReadAllText($"/proc/{processId}/stat");
        }
        catch (IOException)
        {
            return "exited";
        }
        catch (UnauthorizedAccessException)
        {
            return "unknown";
        }
        // The state letter follows the command name in parentheses: T is stopped (SIGSTOP), Z a zombie.
        var afterName = stat.LastIndexOf(')');
        return afterName < 0 || afterName + 2 >= stat.Length ? "unknown"
            : stat[afterName + 2] switch { 'T' or 't' => "paused", 'Z' or 'X' => "exited", _ => "running" };
    }

    /// <summary>Two nodes share a machine (and its /proc) when both listen on loopback addresses.</summary>
    private static bool SameMachine(string nodeAddress, string ourAddress) =>
        IsLoopback(nodeAddress) && IsLoopback(ourAddress);

    private static bool IsLoopback(string address) =>
        Uri.TryCreate(address, UriKind.Absolute, out var uri)
        && (uri.IsLoopback || (IPAddress.TryParse(uri.Host.Trim('[', ']'), out var ip) && IPAddress.IsLoopback(ip)));

    private static string? LastLine(string text) =>
        text.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).LastOrDefault();

    /// <summary>The dotnet host running this node, so the CLI runs on the same runtime.</summary>
    private static string DotnetHost()
    {
        var path = Environment.ProcessPath;
        return path is not null && Path.GetFileNameWithoutExtension(path).Equals("dotnet", StringComparison.OrdinalIgnoreCase) ? path : "dotnet";
    }
}

/// <summary>A dashboard request that failed with a status and one line for the page.</summary>
internal sealed class DashboardException(HttpStatusCode status, string message) : Exception(message)
{
    public HttpStatusCode Status { get; } = status;
}
