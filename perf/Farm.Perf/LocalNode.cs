using System.Diagnostics;
using System.Reflection;
using System.Text.Json;

namespace Farm.Perf;

/// <summary>
/// A single-node farm on a fresh temporary data directory, started as the real node process
/// (<c>dotnet Farm.Gateway.dll --node-id 1 --data DIR --port 0</c>, as `farm up` does) so the
/// measured broker runs in its own process, not in the load generator's. Disposing it kills the
/// node and deletes the directory.
/// </summary>
internal sealed class LocalNode : IAsyncDisposable
{
    private static readonly TimeSpan StartTimeout = TimeSpan.FromSeconds(60);

    private readonly Process _process;
    private readonly string _dataDirectory;

    private LocalNode(Process process, string dataDirectory, string address)
    {
        _process = process;
        _dataDirectory = dataDirectory;
        Address = address;
    }

    public string Address { get; }

    public string ConnectionString => $"Endpoint={Address}";

    public int ProcessId => _process.Id;

    public static async Task<LocalNode> StartAsync(CancellationToken cancellationToken)
    {
        var nodeDll = NodeDllPath();
        if (!File.Exists(nodeDll))
        {
            throw new InvalidOperationException($"the node host {nodeDll} is not built; run: dotnet build src/Gateway -c Release");
        }

        var data = Directory.CreateTempSubdirectory("farm-perf-").FullName;
        var startInfo = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            WorkingDirectory = data,
        };
        foreach (var argument in new[] { nodeDll, "--node-id", "1", "--data", data, "--port", "0" })
        {
            startInfo.ArgumentList.Add(argument);
        }

        startInfo.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        var process = Process.Start(startInfo) ?? throw new InvalidOperationException("could not start the node process");
        var errors = new System.Text.StringBuilder();
        process.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                lock (errors)
                {
                    errors.AppendLine(e.Data);
                }
            }
        };
        process.OutputDataReceived += (_, _) => { };
        process.BeginErrorReadLine();
        process.BeginOutputReadLine();

        var readyFile = Path.Combine(data, "nodes", "node-1.json");
        var deadline = Stopwatch.StartNew();
        while (deadline.Elapsed < StartTimeout)
        {
            if (process.HasExited)
            {
                string log;
                lock (errors)
                {
                    log = errors.ToString();
                }

                Directory.Delete(data, recursive: true);
                throw new InvalidOperationException($"the node exited with code {process.ExitCode} before serving: {log.Trim()}");
            }

            if (TryReadAddress(readyFile) is { } address)
            {
                return new LocalNode(process, data, address);
            }

            await Task.Delay(100, cancellationToken).ConfigureAwait(false);
        }

        process.Kill(entireProcessTree: true);
        throw new TimeoutException($"the node did not serve within {StartTimeout.TotalSeconds} s");
    }

    public async ValueTask DisposeAsync()
    {
        try
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
                await _process.WaitForExitAsync().ConfigureAwait(false);
            }
        }
        catch (InvalidOperationException)
        {
            // Already gone.
        }

        _process.Dispose();
        try
        {
            Directory.Delete(_dataDirectory, recursive: true);
        }
        catch (IOException)
        {
            // A temp directory left behind is not worth failing a run for.
        }
    }

    private static string? TryReadAddress(string readyFile)
    {
        if (!File.Exists(readyFile))
        {
            return null;
        }

        try
        {
            using var document = JsonDocument.Parse(File.ReadAllText(readyFile));
            return document.RootElement.TryGetProperty("address", out var address) ? address.GetString() : null;
        }
        catch (Exception e) when (e is IOException or JsonException)
        {
            return null;
        }
    }

    private static string NodeDllPath()
    {
        var fromBuild = typeof(LocalNode).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .FirstOrDefault(a => a.Key == "FarmNodeDll")?.Value;
        return fromBuild ?? Path.Combine(AppContext.BaseDirectory, "Farm.Gateway.dll");
    }
}
