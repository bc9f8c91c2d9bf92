using System.Diagnostics;

namespace Farm.EndToEnd.Tests;

/// <summary>Network faults on loopback: TCP connections cut with `ss -K`, as a network fault or a keep-alive timeout cuts them.</summary>
internal static class TcpCuts
{
    /// <summary>Cuts every TCP connection to 127.0.0.1:<paramref name="port"/> (both ends see a reset); returns how many.</summary>
    public static int To(int port)
    {
        using var ss = Process.Start(new ProcessStartInfo("ss", ["-K", "-t", "dst", "127.0.0.1", "dport", "=", $":{port}"])
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        })!;
        var output = ss.StandardOutput.ReadToEnd();
        var error = ss.StandardError.ReadToEnd();
        ss.WaitForExit();
        Assert.True(ss.ExitCode == 0, $"ss -K failed ({ss.ExitCode}): {error}");
        // A header line, then one line per socket it closed.
        return output.Split('\n', StringSplitOptions.RemoveEmptyEntries).Length - 1;
    }
}
