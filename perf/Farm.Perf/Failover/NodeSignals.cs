using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;

namespace Farm.Perf.Failover;

/// <summary>
/// SIGSTOP / SIGCONT for a node process (Linux), its state letter, and the POSIX write locks it
/// holds (/proc/locks): a node frozen inside a SQLite write transaction holds that database's write
/// lock, and on a SQLite farm nobody can write that database (take its containers included) until
/// it resumes, a documented limit of a shared database file.
/// </summary>
internal static class NodeSignals
{
    private const int SIGSTOP = 19;
    private const int SIGCONT = 18;

    /// <summary>
    /// SIGSTOP; returns once /proc shows every thread of the process stopped (state T), at most a
    /// second later. A thread inside a system call that cannot be interrupted (an fsync) stops only
    /// when it returns, and may answer a call on its way: the clock starts when all are stopped.
    /// </summary>
    public static async Task StopAsync(int pid, CancellationToken cancellationToken)
    {
        Send(pid, SIGSTOP);
        var clock = Stopwatch.StartNew();
        while (!AllThreadsStopped(pid) && clock.Elapsed < TimeSpan.FromSeconds(1))
        {
            await Task.Delay(1, cancellationToken).ConfigureAwait(false);
        }
    }

    private static bool AllThreadsStopped(int pid)
    {
        try
        {
            return Directory.EnumerateDirectories($"/proc/{pid}/task")
                .All(task => StateLetterOf($"{task}/stat") is 'T' or 't' or null);
        }
        catch (IOException)
        {
            return true;
        }
    }

    public static void Continue(int pid) => Send(pid, SIGCONT);

    /// <summary>The state letter of /proc/PID/stat (R, S, T when stopped, Z); null when the process is gone.</summary>
    public static char? StateLetter(int pid) => StateLetterOf($"/proc/{pid}/stat");

    private static char? StateLetterOf(string statPath)
    {
        try
        {
            var text = File.ReadAllText(statPath);
            var afterName = text.LastIndexOf(')');
            return afterName >= 0 && afterName + 2 < text.Length ? text[afterName + 2] : null;
        }
        catch (IOException)
        {
            return null;
        }
    }

    /// <summary>The POSIX (fcntl) and OFD write locks <paramref name="pid"/> holds, as /proc/locks lines: SQLite's while it writes.</summary>
    public static IReadOnlyList<string> WriteLocksHeldBy(int pid)
    {
        var id = pid.ToString(CultureInfo.InvariantCulture);
        return [.. File.ReadAllLines("/proc/locks").Where(line =>
        {
            // "1: POSIX  ADVISORY  WRITE 1234 fe:00:42 120 120"; the node's own process lock is a FLOCK.
            var fields = line.Split(' ', StringSplitOptions.RemoveEmptyEntries);
            return fields.Length > 4 && fields[1] is "POSIX" or "OFDLCK" && fields[3] == "WRITE" && fields[4] == id;
        }).Select(line => line.Trim())];
    }

    private static void Send(int pid, int signal)
    {
        if (!OperatingSystem.IsLinux())
        {
            throw new InvalidOperationException("failover --signal stop needs Linux signals (SIGSTOP / SIGCONT)");
        }

        if (Kill(pid, signal) != 0)
        {
            throw new InvalidOperationException(string.Create(CultureInfo.InvariantCulture, $"could not signal node process {pid} (errno {Marshal.GetLastPInvokeError()})"));
        }
    }

    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int Kill(int pid, int signal);
}
