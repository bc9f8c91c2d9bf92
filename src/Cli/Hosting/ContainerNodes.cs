using System.Diagnostics;
using System.Globalization;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm node kill|pause|resume|stop|start N --engine docker|podman`: for a farm whose nodes run in
/// containers (deploy/compose.yaml names node N's container farm-nodeN), the engine owns the
/// processes, so the CLI asks it: kill (SIGKILL), pause / unpause (the cgroup freezer, as SIGSTOP
/// freezes a local node), stop (SIGTERM, then the node drains: --drain-on-stop) and start.
/// </summary>
public static class ContainerNodes
{
    /// <summary>What compose.yaml calls node N's container.</summary>
    public static string ContainerName(int nodeId) => string.Create(CultureInfo.InvariantCulture, $"farm-node{nodeId}");

    private static readonly Dictionary<string, (string[] Arguments, string Done)> Verbs = new(StringComparer.Ordinal)
    {
        ["kill"] = (["kill", "--signal", "KILL"], "killed (SIGKILL)"),
        ["pause"] = (["pause"], "paused (frozen until farm node resume)"),
        ["resume"] = (["unpause"], "resumed"),
        ["stop"] = (["stop", "--time", "70"], "stopped (SIGTERM: it handed its containers over first)"),
        ["start"] = (["start"], "started"),
    };

    private static readonly TimeSpan EngineTimeout = TimeSpan.FromSeconds(90);

    public static async Task<int> RunAsync(string engine, string verb, int nodeId, CancellationToken cancellationToken)
    {
        if (engine is not ("docker" or "podman"))
        {
            throw new CliException(ExitCodes.BadInput, $"--engine must be docker or podman, not '{engine}'.");
        }
        if (!Verbs.TryGetValue(verb, out var command))
        {
            throw new CliException(ExitCodes.BadInput, $"farm node {verb} does not work on containers.");
        }

        var container = ContainerName(nodeId);
        var start = new ProcessStartInfo(engine)
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        foreach (var argument in command.Arguments.Append(container))
        {
            start.ArgumentList.Add(argument);
        }

        Process process;
        try
        {
            process = Process.Start(start) ?? throw new CliException(ExitCodes.Error, $"Could not run {engine}.");
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            throw new CliException(ExitCodes.Error, $"Cannot run {engine} ({e.Message}); is it installed and on the PATH?");
        }
        using (process)
        {
            var stderr = process.StandardError.ReadToEndAsync(cancellationToken);
            _ = process.StandardOutput.ReadToEndAsync(cancellationToken);
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(EngineTimeout);
            await process.WaitForExitAsync(timeout.Token);
            if (process.ExitCode != 0)
            {
                var why = (await stderr).Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).LastOrDefault() ?? $"exit code {process.ExitCode}";
                throw new CliException(ExitCodes.Error, $"{engine} {string.Join(' ', command.Arguments)} {container} failed: {why}");
            }
        }
        await Console.Out.WriteLineAsync($"node {nodeId} ({engine} container {container}) {command.Done}");
        return ExitCodes.Ok;
    }
}
