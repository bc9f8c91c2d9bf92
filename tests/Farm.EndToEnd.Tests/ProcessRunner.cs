using Farm.Testing;
using System.Diagnostics;

namespace Farm.EndToEnd.Tests;

/// <summary>What a finished process printed and how it exited.</summary>
internal sealed record ProcessResult(int ExitCode, string Stdout, string Stderr, TimeSpan Elapsed)
{
    /// <summary>The non-empty lines written to stderr.</summary>
    public IReadOnlyList<string> StderrLines => Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);

    public override string ToString() => $"exit {ExitCode} after {Elapsed.TotalSeconds:0.0} s{Environment.NewLine}stdout: {Stdout}{Environment.NewLine}stderr: {Stderr}";
}

/// <summary>Runs a program to completion with a deadline, capturing its output.</summary>
internal static class ProcessRunner
{
    /// <param name="onOutputLine">Called with each line of standard output as it comes (the whole output is still returned).</param>
    public static async Task<ProcessResult> RunAsync(string fileName, IEnumerable<string> arguments, TimeSpan timeout, string? workingDirectory = null, IReadOnlyDictionary<string, string?>? environment = null,
        Action<string>? onOutputLine = null)
    {
        var startInfo = new ProcessStartInfo(fileName)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
            UseShellExecute = false,
            WorkingDirectory = workingDirectory ?? Environment.CurrentDirectory,
        };
        foreach (var argument in arguments)
        {
            startInfo.ArgumentList.Add(argument);
        }

        foreach (var (name, value) in environment ?? new Dictionary<string, string?>())
        {
            if (value is null)
            {
                startInfo.Environment.Remove(name);
            }
            else
            {
                startInfo.Environment[name] = value;
            }
        }

        var clock = Stopwatch.StartNew();
        using var process = Process.Start(startInfo) ?? throw new InvalidOperationException($"Could not start {fileName}.");
        process.StandardInput.Close();
        var stdout = onOutputLine is null ? process.StandardOutput.ReadToEndAsync() : ReadLinesAsync(process.StandardOutput, onOutputLine);
        var stderr = process.StandardError.ReadToEndAsync();

        using var deadline = new CancellationTokenSource(timeout);
        try
        {
            await process.WaitForExitAsync(deadline.Token);
        }
        catch (OperationCanceledException)
        {
            process.Kill(entireProcessTree: true);
            await process.WaitForExitAsync();
            throw new TimeoutException($"{fileName} {string.Join(' ', startInfo.ArgumentList)} did not finish within {timeout}: stdout: {await stdout} stderr: {await stderr}");
        }

        return new ProcessResult(process.ExitCode, await stdout, await stderr, clock.Elapsed);
    }

    private static async Task<string> ReadLinesAsync(StreamReader output, Action<string> onLine)
    {
        var all = new System.Text.StringBuilder();
        while (await output.ReadLineAsync() is { } line)
        {
            all.AppendLine(line);
            onLine(line);
        }
        return all.ToString();
    }

    /// <summary>Waits for a condition until the deadline (<see cref="Eventually"/>).</summary>
    public static Task WaitUntilAsync(Func<bool> condition, TimeSpan timeout, string what) => Eventually.UntilAsync(condition, timeout, what);
}
