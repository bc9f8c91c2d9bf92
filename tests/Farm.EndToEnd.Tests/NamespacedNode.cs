using System.Diagnostics;
using System.Globalization;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A node process (dotnet Farm.Gateway.dll) running inside its network namespace on a PostgreSQL
/// farm: <c>ip netns exec NS dotnet Farm.Gateway.dll --node-id N --host ADDR --port P --store postgres
/// --farm-connection CS --data DIR</c>. Its output goes to a log file and is kept for the test to
/// search. Disposing kills it (SIGKILL).
/// </summary>
internal sealed class NamespacedNode : IDisposable
{
    public const int Port = 5480;

    private readonly Process _process;
    private readonly List<string> _lines = [];
    private readonly StreamWriter _log;
    private readonly TaskCompletionSource _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private bool _closed;

    private NamespacedNode(int id, string address, Process process, StreamWriter log, string logFile)
    {
        Id = id;
        Address = address;
        _process = process;
        _log = log;
        LogFile = logFile;
    }

    public int Id { get; }

    /// <summary>http://ADDR:PORT, as the node advertises itself.</summary>
    public string Endpoint => $"http://{Address}:{Port.ToString(CultureInfo.InvariantCulture)}";

    public string Address { get; }

    public string LogFile { get; }

    public int Pid => _process.Id;

    public bool HasExited => _process.HasExited;

    public static NamespacedNode Start(NetworkNamespaces network, int id, string farmConnection, string dataDirectory, string logDirectory)
    {
        var address = network.NodeAddress(id);
        var startInfo = new ProcessStartInfo(network.ExecPrefix(id)[0])
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
            WorkingDirectory = dataDirectory,
        };
        foreach (var argument in network.ExecPrefix(id).Skip(1))
        {
            startInfo.ArgumentList.Add(argument);
        }
        foreach (var argument in new[]
        {
            DotnetHost(), TestPaths.NodeDll,
            "--node-id", id.ToString(CultureInfo.InvariantCulture),
            "--host", address,
            "--port", Port.ToString(CultureInfo.InvariantCulture),
            "--store", "postgres",
            "--farm-connection", farmConnection,
            "--data", dataDirectory,
        })
        {
            startInfo.ArgumentList.Add(argument);
        }
        startInfo.Environment.Remove("FARM_CONNECTION");
        startInfo.Environment.Remove("FARM_HOME");

        var logFile = Path.Combine(logDirectory, $"node-{id}.log");
        var log = new StreamWriter(logFile, append: true) { AutoFlush = true };
        var process = new Process { StartInfo = startInfo };
        var node = new NamespacedNode(id, address, process, log, logFile);
        process.OutputDataReceived += (_, e) => node.OnLine(e.Data);
        process.ErrorDataReceived += (_, e) => node.OnLine(e.Data);
        process.Exited += (_, _) => node._ready.TrySetException(new InvalidOperationException(
            $"node {id} exited (code {process.ExitCode}) before it served; its log: {node.Tail(30)}"));
        process.EnableRaisingEvents = true;
        if (!process.Start())
        {
            throw new InvalidOperationException($"Could not start node {id}.");
        }
        process.StandardInput.Close();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return node;
    }

    /// <summary>Waits until the node says it serves (it registered, heartbeats and took its first containers).</summary>
    public async Task WaitUntilServingAsync(TimeSpan deadline)
    {
        try
        {
            await _ready.Task.WaitAsync(deadline);
        }
        catch (TimeoutException)
        {
            throw new TimeoutException($"node {Id} did not say it serves within {deadline}; its log: {Tail(30)}");
        }
    }

    /// <summary>How many lines the node wrote so far: a mark for <see cref="LoggedSince"/>.</summary>
    public int LineCount
    {
        get
        {
            lock (_lines)
            {
                return _lines.Count;
            }
        }
    }

    /// <summary>True when some line the node wrote contains <paramref name="text"/>.</summary>
    public bool Logged(string text) => LoggedSince(0, text);

    /// <summary>True when a line written after the first <paramref name="mark"/> lines contains <paramref name="text"/>.</summary>
    public bool LoggedSince(int mark, string text)
    {
        lock (_lines)
        {
            return _lines.Skip(mark).Any(l => l.Contains(text, StringComparison.Ordinal));
        }
    }

    /// <summary>The last lines of its log, for a failure message.</summary>
    public string Tail(int lines)
    {
        lock (_lines)
        {
            return string.Join(Environment.NewLine, _lines.TakeLast(lines));
        }
    }

    private void OnLine(string? line)
    {
        if (line is null)
        {
            return;
        }
        lock (_lines)
        {
            _lines.Add(line);
        }
        lock (_log)
        {
            // Output can still arrive while the node is being disposed.
            if (!_closed)
            {
                _log.WriteLine(line);
            }
        }
        if (line.Contains($"Farm node {Id} serving at", StringComparison.Ordinal))
        {
            _ready.TrySetResult();
        }
    }

    public void Dispose()
    {
        try
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
                _process.WaitForExit(10_000);
            }
        }
        catch (InvalidOperationException)
        {
            // Never started or already gone.
        }
        _process.Dispose();
        lock (_log)
        {
            _closed = true;
            _log.Dispose();
        }
    }

    /// <summary>The dotnet host running the tests, so the node runs on the same runtime.</summary>
    private static string DotnetHost()
    {
        var fromTestHost = Environment.GetEnvironmentVariable("DOTNET_HOST_PATH");
        if (!string.IsNullOrEmpty(fromTestHost) && File.Exists(fromTestHost))
        {
            return fromTestHost;
        }
        var self = Environment.ProcessPath;
        return self is not null && Path.GetFileNameWithoutExtension(self) == "dotnet" ? self : "dotnet";
    }
}
