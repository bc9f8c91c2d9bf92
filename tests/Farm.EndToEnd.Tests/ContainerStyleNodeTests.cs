using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Farm.Client;
using Farm.Testing;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Nodes started as a container image starts them: no `farm` CLI, every setting from FARM_*
/// environment variables, an advertised host name, GET /healthz for the engine's health check, and
/// --drain-on-stop so that SIGTERM (docker stop) hands the node's containers to the others by
/// planned moves before it exits, with nothing acknowledged lost.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed partial class ContainerStyleNodeTests
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task ANodeConfiguredByEnvironment_AdvertisesItsHost_ReportsHealth_AndHandsItsContainersOverOnSigterm()
    {
        var data = Directory.CreateTempSubdirectory("farm-env-").FullName;
        using var node1 = StartNode(1, data);
        using var node2 = StartNode(2, data);
        try
        {
            using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(5) };
            foreach (var node in new[] { node1, node2 })
            {
                await node.WaitUntilServingAsync(Deadline);
                if (!await Eventually.HoldsWithinAsync(async () => await HealthAsync(http, node) == HttpStatusCode.OK, Deadline))
                {
                    Assert.Fail($"node {node.Id}'s /healthz did not answer 200 within {Deadline}; its log: {node.Log}");
                }
            }
            var connection = $"Endpoint=http://127.0.0.1:{node1.Port},http://127.0.0.1:{node2.Port}";
            using var admin = new FarmAdministrationClient(connection);
            await admin.CreateContainerAsync();
            await admin.CreateContainerAsync();
            await admin.CreateQueueAsync("work");
            await using var client = new FarmClient(connection);
            await using (var sender = client.CreateSender("work"))
            {
                await sender.SendMessagesAsync([.. Enumerable.Range(1, 20).Select(i => new FarmMessage($"job {i}"))]);
            }
            var owned = await LocalFarm.WaitForContainerOwnedByAsync(admin, 1);

            // Each node registered the host it advertises, not the address it listens on.
            var status = await admin.GetFarmStatusAsync();
            Assert.Equal(
                [$"http://localhost:{node1.Port}", $"http://localhost:{node2.Port}"],
                status.Nodes.OrderBy(n => n.Id).Select(n => n.Address));
            Assert.Equal($"http://localhost:{node1.MetricsPort}/metrics", status.Nodes.Single(n => n.Id == 1).MetricsUrl);

            // The two new containers may still be unowned (taken on a node's next pass): what node 1
            // holds is known once every container has an owner.
            await Eventually.UntilAsync(async () => (await admin.GetContainersAsync()).All(c => c.OwnerNode is not null), Deadline, "every container owned");

            // docker stop: SIGTERM. The node drains first, then exits on its own with 0.
            var mine = (await admin.GetContainersAsync()).Where(c => c.OwnerNode == 1).Select(c => c.Id).ToList();
            Signal(node1.Process.Id, "TERM");
            Assert.True(node1.Process.WaitForExit(Deadline), $"node 1 did not exit within {Deadline} of SIGTERM; its log: {node1.Log}");
            // The timed wait returns at the exit, maybe before the last lines of its redirected
            // output were read; this one waits for them (a clean-clone run missed the drain line).
            node1.Process.WaitForExit();
            Assert.Equal(0, node1.Process.ExitCode);
            Assert.Contains("handing its", node1.Log, StringComparison.Ordinal);

            // Node 1 released the last one before it exited; node 2 takes it on its next pass.
            await Eventually.UntilAsync(async () => (await admin.GetContainersAsync()).All(c => c.OwnerNode == 2), Deadline, "every container owned by node 2");
            using var farm = JsonDocument.Parse(await http.GetStringAsync($"http://127.0.0.1:{node2.MetricsPort}/api/farm"));
            var planned = farm.RootElement.GetProperty("changes").EnumerateArray()
                .Where(c => c.GetProperty("kind").GetString() == "planned" && c.GetProperty("from").GetInt64() == 1)
                .Select(c => c.GetProperty("container").GetInt64()).ToList();
            Assert.Equal(mine.Order(), planned.Order());
            Assert.Contains(owned.Id, planned);
            Assert.Equal(20, (await admin.GetQueueRuntimePropertiesAsync("work")).ActiveMessageCount);
        }
        finally
        {
            foreach (var node in new[] { node1, node2 })
            {
                if (!node.Process.HasExited)
                {
                    node.Process.Kill();
                }
            }
            Directory.Delete(data, recursive: true);
        }
    }

    [Theory]
    [InlineData("postgres", null, 2, "--store postgres needs --farm-connection")]
    [InlineData("postgres", "Host=127.0.0.1;Port=1;Database=farm;Username=farm;Password=secret;Timeout=3", 1, "cannot start: Cannot open the PostgreSQL farm database 'farm' on 127.0.0.1:1")]
    [InlineData("oracle", null, 2, "--store oracle is not supported")]
    public async Task ABadlyConfiguredNode_ExitsWithOneClearLine(string store, string? farmConnection, int exitCode, string line)
    {
        var data = Directory.CreateTempSubdirectory("farm-env-").FullName;
        try
        {
            var environment = new Dictionary<string, string?>
            {
                ["FARM_NODE_ID"] = "1",
                ["FARM_DATA"] = data,
                ["FARM_PORT"] = "0",
                ["FARM_STORE"] = store,
                ["FARM_FARM_CONNECTION"] = farmConnection,
                ["FARM_CONNECTION"] = null,
                ["FARM_HOME"] = null,
            };
            var result = await ProcessRunner.RunAsync("dotnet", [TestPaths.NodeDll], Deadline, workingDirectory: data, environment: environment);

            Assert.True(result.ExitCode == exitCode, result.ToString());
            var errors = result.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
            Assert.True(errors.Length == 1, $"expected one line on stderr: {result}");
            Assert.Contains(line, errors[0], StringComparison.Ordinal);
            Assert.DoesNotContain("secret", result.Stderr + result.Stdout, StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(data, recursive: true);
        }
    }

    [Fact]
    public async Task ANodeWhoseAmqpPortIsTaken_ExitsWithOneLineNamingIt()
    {
        var data = Directory.CreateTempSubdirectory("farm-env-").FullName;
        using var taken = new TcpListener(IPAddress.Loopback, 0);
        taken.Start();
        var port = ((IPEndPoint)taken.LocalEndpoint).Port;
        try
        {
            var environment = new Dictionary<string, string?>
            {
                ["FARM_NODE_ID"] = "1",
                ["FARM_DATA"] = data,
                ["FARM_PORT"] = "0",
                ["FARM_AMQP_PORT"] = port.ToString(CultureInfo.InvariantCulture),
                ["FARM_CONNECTION"] = null,
                ["FARM_HOME"] = null,
            };
            var result = await ProcessRunner.RunAsync("dotnet", [TestPaths.NodeDll], Deadline, workingDirectory: data, environment: environment);

            Assert.True(result.ExitCode == 1, result.ToString());
            var errors = result.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
            Assert.True(errors.Length == 1, $"expected one line on stderr: {result}");
            Assert.Contains($"cannot listen for AMQP on 127.0.0.1:{port} (--amqp-port)", errors[0], StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(data, recursive: true);
        }
    }

    private static async Task<HttpStatusCode?> HealthAsync(HttpClient http, EnvNode node)
    {
        try
        {
            using var response = await http.GetAsync($"http://127.0.0.1:{node.MetricsPort}/healthz");
            return response.StatusCode;
        }
        catch (HttpRequestException)
        {
            return null; // not listening yet
        }
    }

    /// <summary>
    /// Starts a node on ports the OS picks (port 0), read back from its "serving at" line: a port
    /// probed free and then released can be taken by another test's connection before the node binds it.
    /// </summary>
    private static EnvNode StartNode(int id, string data)
    {
        var start = new ProcessStartInfo("dotnet")
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        start.ArgumentList.Add(TestPaths.NodeDll);
        start.Environment.Remove("FARM_CONNECTION");
        start.Environment.Remove("FARM_HOME");
        start.Environment["FARM_NODE_ID"] = id.ToString(CultureInfo.InvariantCulture);
        start.Environment["FARM_DATA"] = data;
        start.Environment["FARM_HOST"] = "0.0.0.0";
        start.Environment["FARM_PORT"] = "0";
        start.Environment["FARM_METRICS_PORT"] = "0";
        start.Environment["FARM_ADVERTISE_HOST"] = "localhost";
        start.Environment["FARM_DRAIN_ON_STOP"] = "true";
        var node = new EnvNode(id, new Process { StartInfo = start, EnableRaisingEvents = true });
        node.Process.OutputDataReceived += (_, e) => node.Append(e.Data);
        node.Process.ErrorDataReceived += (_, e) => node.Append(e.Data);
        node.Process.Exited += (_, _) => node.Exited();
        node.Process.Start();
        node.Process.BeginOutputReadLine();
        node.Process.BeginErrorReadLine();
        return node;
    }

    private static void Signal(int pid, string signal)
    {
        using var kill = Process.Start("kill", ["-" + signal, pid.ToString(CultureInfo.InvariantCulture)]);
        kill.WaitForExit();
    }

    private sealed partial class EnvNode(int id, Process process) : IDisposable
    {
        private readonly StringBuilder _log = new();
        private readonly TaskCompletionSource<(int Port, int MetricsPort)> _serving = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public int Id { get; } = id;

        /// <summary>The gRPC port the node bound; known once it serves.</summary>
        public int Port => _serving.Task.Result.Port;

        /// <summary>The port of its /metrics, /healthz and /api listener; known once it serves.</summary>
        public int MetricsPort => _serving.Task.Result.MetricsPort;

        public Process Process { get; } = process;

        /// <summary>Waits for the node's "serving at" line; fails at once, with its log, if it exits first.</summary>
        public async Task WaitUntilServingAsync(TimeSpan deadline)
        {
            try
            {
                await _serving.Task.WaitAsync(deadline);
            }
            catch (TimeoutException)
            {
                throw new TimeoutException($"node {Id} did not say it serves within {deadline}; its log: {Log}");
            }
        }

        public void Exited()
        {
            if (_serving.Task.IsCompleted)
            {
                return;
            }
            try
            {
                // Let the reader finish the redirected output first, so the failure carries the last lines.
                Process.WaitForExit();
                _serving.TrySetException(new InvalidOperationException($"node {Id} exited (code {Process.ExitCode}) before it served; its log: {Log}"));
            }
            catch (Exception e) when (e is InvalidOperationException or ObjectDisposedException)
            {
                _serving.TrySetException(new InvalidOperationException($"node {Id} exited before it served; its log: {Log}"));
            }
        }

        public string Log
        {
            get
            {
                lock (_log)
                {
                    return _log.ToString();
                }
            }
        }

        public void Append(string? line)
        {
            if (line is not null)
            {
                lock (_log)
                {
                    _log.AppendLine(line);
                }
                if (ServingLine().Match(line) is { Success: true } serving)
                {
                    _serving.TrySetResult((int.Parse(serving.Groups[1].Value, CultureInfo.InvariantCulture), int.Parse(serving.Groups[2].Value, CultureInfo.InvariantCulture)));
                }
            }
        }

        [GeneratedRegex(@"serving at http://[^:]+:(\d+), metrics at http://[^:]+:(\d+)/")]
        private static partial Regex ServingLine();

        public void Dispose() => Process.Dispose();
    }
}
