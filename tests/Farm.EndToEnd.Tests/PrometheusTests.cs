using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Farm.Client;
using Farm.Testing;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A real Prometheus (Debian's package, FARM_TEST_PROMETHEUS; ./test.sh installs it) scraping a
/// 3-node farm at the metrics URLs `farm status --json` gives, asked through its HTTP query API.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class PrometheusTests(ITestOutputHelper output)
{
    private const string Variable = "FARM_TEST_PROMETHEUS";
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(60);

    private static string? Binary { get; } =
        Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } path ? path
        : File.Exists("/usr/bin/prometheus") ? "/usr/bin/prometheus" : null;

    /// <summary>Skipped only off CI, where a missing Prometheus is a failure.</summary>
    public static string? SkipReason { get; } =
        Binary is not null || string.Equals(Environment.GetEnvironmentVariable("CI"), "true", StringComparison.OrdinalIgnoreCase)
            ? null
            : $"{Variable} is not set and /usr/bin/prometheus is missing (./test.sh installs Debian's package).";

    [PrometheusFact]
    public async Task Prometheus_SeesTheQueuesMessageCounterRise_AndTheNodesOwnEveryContainer()
    {
        Assert.True(Binary is not null, $"no Prometheus: set {Variable} (./test.sh installs Debian's prometheus package)");

        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        for (var i = 0; i < 5; i++)
        {
            await admin.CreateContainerAsync();
        }
        await admin.CreateQueueAsync("scraped");
        await admin.CreateQueueAsync("other");

        using var status = await farm.StatusJsonAsync();
        var targets = status.RootElement.GetProperty("nodes").EnumerateArray()
            .Select(n => new Uri(n.GetProperty("metrics_url").GetString()!)).ToList();
        Assert.Equal(3, targets.Count);
        var containers = status.RootElement.GetProperty("containers").GetArrayLength();

        await using var prometheus = await PrometheusServer.StartAsync(Binary!, targets);
        output.WriteLine($"prometheus at {prometheus.Address} scraping {string.Join(", ", targets)}");

        // Every node is scraped, and what they say they own adds up to the farm's containers.
        await WaitForAsync(prometheus, "count(up == 1)", v => v == 3, "all three nodes to be scraped");
        await WaitForAsync(prometheus, "sum(farm_node_containers_owned)", v => v == containers, $"the nodes to own all {containers} containers");
        Assert.Equal(3, await prometheus.QueryAsync("count(farm_node_containers_owned)"));

        // The counter of the queue sent to rises by what was sent; another queue's stays where it was.
        await using (var client = new FarmClient(farm.ConnectionString))
        await using (var sender = client.CreateSender("scraped"))
        {
            for (var i = 0; i < 7; i++)
            {
                await sender.SendMessageAsync(new FarmMessage($"m{i}"));
            }
        }
        var sent = await WaitForAsync(prometheus, """sum(farm_messages_sent_total{messaging_destination_name="scraped"})""", v => v >= 7, "the send counter of 'scraped' to reach 7");
        Assert.Equal(7, sent);
        Assert.Null(await prometheus.QueryAsync("""sum(farm_messages_sent_total{messaging_destination_name="other"})"""));
        await WaitForAsync(prometheus, """sum(farm_entity_messages{messaging_destination_name="scraped",farm_message_state="active"})""", v => v == 7, "7 active messages in 'scraped'");

        // Commit durations are seconds in buckets that can tell them apart: those sends' commits
        // land under 100 ms (OpenTelemetry's default buckets, meant for milliseconds, have no 0.1).
        await WaitForAsync(prometheus, """sum(farm_container_commit_duration_seconds_bucket{le="0.1"})""", v => v >= 1, "commits counted in the 0.1 s bucket");
    }

    private static async Task<double> WaitForAsync(PrometheusServer prometheus, string query, Func<double, bool> done, string what)
    {
        double? last = null;
        if (await Eventually.HoldsWithinAsync(async () => (last = await prometheus.QueryAsync(query)) is { } value && done(value), Patience, TimeSpan.FromMilliseconds(250)))
        {
            return last!.Value;
        }
        throw new Xunit.Sdk.XunitException($"timed out after {Patience.TotalSeconds} s waiting for {what}: {query} = {last?.ToString(CultureInfo.InvariantCulture) ?? "no data"}");
    }

    /// <summary>A Prometheus server of this test's own: a config naming the targets, a throwaway data directory, a free port.</summary>
    private sealed class PrometheusServer : IAsyncDisposable
    {
        private readonly Process _process;
        private readonly string _directory;
        private readonly HttpClient _http = new();

        private PrometheusServer(Process process, string directory, Uri address)
        {
            _process = process;
            _directory = directory;
            Address = address;
        }

        public Uri Address { get; }

        public static async Task<PrometheusServer> StartAsync(string binary, IReadOnlyList<Uri> targets)
        {
            var directory = Directory.CreateTempSubdirectory("farm-prometheus-").FullName;
            var config = Path.Combine(directory, "prometheus.yml");
            await File.WriteAllTextAsync(config, $"""
                global:
                  scrape_interval: 1s
                  scrape_timeout: 1s
                scrape_configs:
                  - job_name: farm
                    metrics_path: /metrics
                    static_configs:
                      - targets: [{string.Join(", ", targets.Select(t => $"'{t.Authority}'"))}]
                """);
            var port = FreePorts.Pick();
            var start = new ProcessStartInfo(binary)
            {
                ArgumentList =
                {
                    $"--config.file={config}",
                    $"--storage.tsdb.path={Path.Combine(directory, "data")}",
                    $"--web.listen-address=127.0.0.1:{port}",
                },
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            var process = Process.Start(start)!;
            process.BeginOutputReadLine();
            process.BeginErrorReadLine();
            var server = new PrometheusServer(process, directory, new Uri($"http://127.0.0.1:{port}"));
            await server.WaitReadyAsync();
            return server;
        }

        private async Task WaitReadyAsync()
        {
            var ready = await Eventually.HoldsWithinAsync(async () =>
            {
                Assert.False(_process.HasExited, $"prometheus exited with {(_process.HasExited ? _process.ExitCode : 0)}");
                try
                {
                    using var response = await _http.GetAsync(new Uri(Address, "/-/ready"));
                    return response.IsSuccessStatusCode;
                }
                catch (HttpRequestException)
                {
                    return false; // not listening yet
                }
            }, Patience, TimeSpan.FromMilliseconds(100));
            Assert.True(ready, "prometheus did not become ready");
        }

        /// <summary>The value of an instant query with one result, or null when it has none.</summary>
        public async Task<double?> QueryAsync(string query)
        {
            using var response = await _http.GetAsync(new Uri(Address, "/api/v1/query?query=" + Uri.EscapeDataString(query)));
            response.EnsureSuccessStatusCode();
            using var json = JsonDocument.Parse(await response.Content.ReadAsStringAsync());
            var result = json.RootElement.GetProperty("data").GetProperty("result");
            if (result.GetArrayLength() == 0)
            {
                return null;
            }
            var value = Assert.Single(result.EnumerateArray()).GetProperty("value")[1].GetString()!;
            return double.Parse(value, CultureInfo.InvariantCulture);
        }

        public async ValueTask DisposeAsync()
        {
            _http.Dispose();
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
                await _process.WaitForExitAsync();
            }
            _process.Dispose();
            Directory.Delete(_directory, recursive: true);
        }
    }
}

/// <summary>A fact that needs a Prometheus binary; skipped without one only off CI.</summary>
public sealed class PrometheusFactAttribute : FactAttribute
{
    public PrometheusFactAttribute() => Skip = PrometheusTests.SkipReason;
}
