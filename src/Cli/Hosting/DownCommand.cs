using System.CommandLine;
using System.Globalization;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm down [--kill]`: stops every node of the local farm, SIGTERM first (graceful, killed after
/// 15 s; a paused node is resumed first so it can handle it) or SIGKILL at once with --kill to
/// simulate a crash. The data stays.
/// </summary>
public static class DownCommand
{
    public static Command Create()
    {
        var kill = new Option<bool>("--kill")
        {
            Description = "Kill the nodes with SIGKILL at once (simulates a crash) instead of stopping them gracefully",
        };

        var command = new Command("down", "Stop the local farm (the data stays)")
        {
            kill,
        };
        command.SetAction((parseResult, cancellationToken) => RunAsync(
            new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult)),
            parseResult.GetValue(kill),
            cancellationToken));
        return command;
    }

    private static async Task<int> RunAsync(FarmDataDirectory data, bool kill, CancellationToken cancellationToken)
    {
        if (!Directory.Exists(data.Root))
        {
            await Console.Error.WriteLineAsync($"No farm on {data.Root}.");
            return ExitCodes.Ok;
        }

        using var dataLock = data.AcquireLock();
        var state = FarmStateFile.TryRead(data);
        var nodes = RunningNodes(data, state);
        if (nodes.Count == 0)
        {
            await Console.Error.WriteLineAsync($"No farm is running on {data.Root}.");
        }
        else
        {
            var forced = await NodeProcesses.StopAsync([.. nodes.Select(n => n.Pid)], kill, cancellationToken);
            foreach (var (nodeId, pid) in nodes)
            {
                var how = kill ? "killed (SIGKILL)" : forced.Contains(pid) ? "killed after the graceful timeout" : "stopped";
                await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {nodeId} (pid {pid}) {how}"));
            }
        }

        if (state is not null)
        {
            FarmStateFile.Write(data, state with
            {
                State = FarmState.Stopped,
                StoppedAt = state.State == FarmState.Running ? DateTimeOffset.UtcNow : state.StoppedAt,
                Nodes = [.. state.Nodes.Select(n => n with { Pid = null })],
            });
        }

        return ExitCodes.Ok;
    }

    /// <summary>Live node processes named by farm.json ('farm up' records each node as it starts it).</summary>
    private static List<(int NodeId, int Pid)> RunningNodes(FarmDataDirectory data, FarmStateRecord? state)
    {
        var nodes = new List<(int NodeId, int Pid)>();
        foreach (var node in state?.Nodes ?? [])
        {
            if (node.Pid is { } pid && NodeProcesses.IsFarmNode(pid))
            {
                nodes.Add((node.Id, pid));
            }
        }

        return nodes;
    }
}
