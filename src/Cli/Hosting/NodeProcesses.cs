using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;

namespace Farm.Cli.Hosting;

/// <summary>
/// Node processes by pid: whether one is still a live Farm node, and stopping it with SIGTERM
/// (graceful) or SIGKILL (a crash). The nodes of a detached farm are not our children, so this
/// works from pids alone.
/// </summary>
public static class NodeProcesses
{
    /// <summary>How long a node gets to stop after SIGTERM before it is killed.</summary>
    public static readonly TimeSpan GracefulStopTimeout = TimeSpan.FromSeconds(15);

    /// <summary>How long to wait for a killed process to disappear.</summary>
    public static readonly TimeSpan KillTimeout = TimeSpan.FromSeconds(10);

    private static readonly TimeSpan PollInterval = TimeSpan.FromMilliseconds(50);

    private const int SIGKILL = 9;
    private const int SIGTERM = 15;

    // SIGSTOP and SIGCONT differ between Linux and the BSDs (macOS).
    private static int SIGSTOP => OperatingSystem.IsLinux() ? 19 : 17;

    private static int SIGCONT => OperatingSystem.IsLinux() ? 18 : 19;

    /// <summary>
    /// True when the pid is a running (not zombie) process that looks like a Farm node, so a pid
    /// reused by another program after a reboot is not mistaken for the farm.
    /// </summary>
    public static bool IsFarmNode(int pid)
    {
        if (!IsAlive(pid))
        {
            return false;
        }

        var cmdline = ReadProcFile(pid, "cmdline");
        return cmdline is null
            || cmdline.Contains("Farm.Gateway", StringComparison.Ordinal)
            || cmdline.Contains("--node-id", StringComparison.Ordinal);
    }

    /// <summary>True while the process exists and has not exited (a zombie counts as exited).</summary>
    public static bool IsAlive(int pid)
    {
        if (pid <= 0)
        {
            return false;
        }

        if (OperatingSystem.IsWindows())
        {
            try
            {
                using var process = Process.GetProcessById(pid);
                return !process.HasExited;
            }
            catch (ArgumentException)
            {
                return false;
            }
        }

        if (Kill(pid, 0) != 0 && Marshal.GetLastPInvokeError() != EPERM)
        {
            return false;
        }

        // An orphaned node whose new parent does not reap it stays a zombie; it is gone all the same.
        var stat = ReadProcFile(pid, "stat");
        if (stat is null)
        {
            return true;
        }

        var afterName = stat.LastIndexOf(')');
        return afterName < 0 || afterName + 2 >= stat.Length || stat[afterName + 2] != 'Z';
    }

    /// <summary>
    /// How the process looks from here: running, paused (state T in /proc/PID/stat: stopped by
    /// SIGSTOP) or exited. Where /proc cannot be read, a live process counts as running.
    /// </summary>
    public static NodeProcessState StateOf(int pid)
    {
        if (!IsAlive(pid))
        {
            return NodeProcessState.Exited;
        }

        var stat = ReadProcFile(pid, "stat");
        var afterName = stat?.LastIndexOf(')') ?? -1;
        if (stat is null || afterName < 0 || afterName + 2 >= stat.Length)
        {
            return NodeProcessState.Running;
        }

        return stat[afterName + 2] is 'T' or 't' ? NodeProcessState.Paused : NodeProcessState.Running;
    }

    /// <summary>SIGSTOP: the process freezes (no heartbeats, no writes) until SIGCONT.</summary>
    public static Task PauseAsync(int pid, CancellationToken cancellationToken)
    {
        RefuseOnWindows("pause");
        Signal(pid, SIGSTOP);
        return WaitForStateAsync(pid, NodeProcessState.Paused, cancellationToken);
    }

    /// <summary>SIGCONT: a paused process runs again.</summary>
    public static Task ResumeAsync(int pid, CancellationToken cancellationToken)
    {
        RefuseOnWindows("resume");
        Signal(pid, SIGCONT);
        return WaitForStateAsync(pid, NodeProcessState.Running, cancellationToken);
    }

    private static async Task WaitForStateAsync(int pid, NodeProcessState wanted, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (StateOf(pid) is var state && state != wanted)
        {
            if (state == NodeProcessState.Exited)
            {
                throw new CliException(ExitCodes.Error, string.Create(CultureInfo.InvariantCulture, $"Node process {pid} exited."));
            }

            if (clock.Elapsed >= KillTimeout)
            {
                throw new CliException(ExitCodes.Error, string.Create(CultureInfo.InvariantCulture, $"Node process {pid} is still {state.ToString().ToLowerInvariant()} {KillTimeout.TotalSeconds:0} s after the signal."));
            }

            await Task.Delay(PollInterval, cancellationToken);
        }
    }

    private static void RefuseOnWindows(string what)
    {
        if (OperatingSystem.IsWindows())
        {
            throw new CliException(ExitCodes.Error, $"farm node {what} needs Unix signals (SIGSTOP / SIGCONT).");
        }
    }

    /// <summary>
    /// Sends SIGTERM (or SIGKILL) to every pid, then waits until all are gone. A paused process is
    /// sent SIGCONT first, so it can handle SIGTERM and stop gracefully.
    /// </summary>
    /// <returns>The pids that had to be killed after the graceful timeout.</returns>
    public static async Task<IReadOnlyList<int>> StopAsync(IReadOnlyCollection<int> pids, bool kill, CancellationToken cancellationToken)
    {
        foreach (var pid in pids)
        {
            if (!kill && !OperatingSystem.IsWindows() && StateOf(pid) == NodeProcessState.Paused)
            {
                Signal(pid, SIGCONT);
            }

            Signal(pid, kill ? SIGKILL : SIGTERM);
        }

        var remaining = await WaitForExitAsync(pids, kill ? KillTimeout : GracefulStopTimeout, cancellationToken);
        if (kill || remaining.Count == 0)
        {
            return [];
        }

        foreach (var pid in remaining)
        {
            Signal(pid, SIGKILL);
        }

        var stuck = await WaitForExitAsync(remaining, KillTimeout, cancellationToken);
        if (stuck.Count > 0)
        {
            throw new CliException(ExitCodes.Error, $"Node process(es) {string.Join(", ", stuck)} did not exit after SIGKILL.");
        }

        return remaining;
    }

    /// <summary>Waits until none of the pids is alive, or the timeout passes; returns those still alive.</summary>
    public static async Task<IReadOnlyList<int>> WaitForExitAsync(IReadOnlyCollection<int> pids, TimeSpan timeout, CancellationToken cancellationToken)
    {
        var deadline = Stopwatch.StartNew();
        while (true)
        {
            var alive = pids.Where(IsAlive).ToList();
            if (alive.Count == 0 || deadline.Elapsed >= timeout)
            {
                return alive;
            }

            await Task.Delay(PollInterval, cancellationToken);
        }
    }

    private static void Signal(int pid, int signal)
    {
        if (OperatingSystem.IsWindows())
        {
            // No SIGTERM on Windows: both become a kill.
            try
            {
                using var process = Process.GetProcessById(pid);
                process.Kill(entireProcessTree: true);
            }
            catch (Exception ex) when (ex is ArgumentException or InvalidOperationException)
            {
                // Already gone.
            }

            return;
        }

        if (Kill(pid, signal) != 0 && Marshal.GetLastPInvokeError() is var errno && errno != ESRCH)
        {
            throw new CliException(ExitCodes.Error, string.Create(CultureInfo.InvariantCulture, $"Could not signal node process {pid} (errno {errno})."));
        }
    }

    private static string? ReadProcFile(int pid, string name)
    {
        try
        {
            return File.ReadAllText(string.Create(CultureInfo.InvariantCulture, $"/proc/{pid}/{name}")).Replace('\0', ' ');
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }

    private const int EPERM = 1;
    private const int ESRCH = 3;

    // .NET has no API to send a signal other than SIGKILL to another process.
    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int Kill(int pid, int signal);
}

/// <summary>A node process as the CLI sees it on this machine.</summary>
public enum NodeProcessState
{
    Running,
    Paused,
    Exited,
}
