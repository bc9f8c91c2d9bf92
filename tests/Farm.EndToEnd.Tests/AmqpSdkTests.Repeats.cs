using System.Globalization;
using System.Text.Json.Nodes;
using Farm.Client;
using Farm.Testing;

namespace Farm.EndToEnd.Tests;

public sealed partial class AmqpSdkTests
{
    /// <summary>
    /// A 2-node farm; the JS SDK sends through the node that does not own the queue (so its node
    /// forwards), 8 sends in flight (tests/amqp-client/repeats.mjs), while the test cuts every TCP
    /// connection to the owner five times. The forwarding node tries a send again when its
    /// connection broke before the owner answered; each acknowledged message is received exactly
    /// once. Without a (producer, send id) pair on the AMQP front door's sends, a send the owner
    /// had stored was stored a second time (and, when the owner was killed instead, delivered
    /// again after the receiver had completed the first copy).
    /// </summary>
    [NodeFact]
    public async Task JsSdk_SendsForwardedToTheOwner_AreStoredOnce_WhenTheConnectionsToTheOwnerAreCut()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 2);
        var owner = await CreateQueueOnASpreadFarmAsync(farm, nodes: 2, containersPerNode: 1, "repeats");
        var other = owner == 1 ? 2 : 1;
        var ownerPort = new Uri(farm.Endpoints[owner - 1]).Port;

        var signals = Directory.CreateTempSubdirectory("farm-amqp-repeats-").FullName;
        try
        {
            var readyFile = Path.Combine(signals, "ready");
            var stopFile = Path.Combine(signals, "stop");
            var settings = await SettingsAsync(farm);
            settings["repeats"] = new JsonObject
            {
                ["connection"] = await AmqpConnectionStringAsync(farm, "--node", other.ToString(CultureInfo.InvariantCulture)),
                ["queue"] = "repeats",
                ["readyFile"] = readyFile,
                ["stopFile"] = stopFile,
                ["loops"] = 8,
            };

            var run = RunNodeAsync(settings, "repeats.mjs");
            await Eventually.UntilAsync(() => File.Exists(readyFile) || run.IsCompleted, TimeSpan.FromSeconds(90), "repeats.mjs has sends flowing");
            Assert.False(run.IsCompleted, $"repeats.mjs ended before the cuts: {(run.IsCompleted ? await run : null)}");
            var cut = 0;
            for (var round = 0; round < 5; round++)
            {
                // Sends stored since the last cut: the forwarding node is connected and busy again.
                var before = (await farm.GetQueueCountsAsync("repeats")).TotalMessageCount;
                await Eventually.UntilAsync(async () => (await farm.GetQueueCountsAsync("repeats")).TotalMessageCount >= before + 100,
                    TimeSpan.FromSeconds(60), $"100 more sends stored before cut {round + 1}");
                cut += TcpCuts.To(ownerPort);
            }
            await File.WriteAllTextAsync(stopFile, "stop\n");
            var result = await run;

            var report = JsonNode.Parse(result.Stdout.Trim().Split('\n')[^1]);
            Assert.True(result.ExitCode == 0 && report?["failure"] is null, $"repeats.mjs failed (owner node {owner}, client on node {other}); node logs: {farm.DataDirectory}/logs{Environment.NewLine}{result}");
            var acked = Ids(report!["acked"]);
            var unknown = report["sendErrors"]!.AsArray().Select(e => (string)e!["messageId"]!).ToHashSet(StringComparer.Ordinal);

            var received = new List<string>();
            await using (var client = new FarmClient(farm.ConnectionString))
            await using (var receiver = client.CreateReceiver("repeats", new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete }))
            {
                await Eventually.UntilAsync(async () =>
                {
                    received.AddRange((await receiver.ReceiveMessagesAsync(500, TimeSpan.FromSeconds(1))).Select(m => m.MessageId!));
                    return (await farm.GetQueueCountsAsync("repeats")).TotalMessageCount == 0;
                }, TimeSpan.FromSeconds(60), "the queue was drained");
            }

            var context = $"owner node {owner}, client on node {other}; {cut} connections cut; acked {acked.Count}, failed {unknown.Count}, received {received.Count}";
            output.WriteLine(context);
            Assert.True(cut >= 5, $"ss -K cut only {cut} connections ({context})");
            var twice = received.GroupBy(id => id, StringComparer.Ordinal).Where(g => g.Count() > 1).Select(g => g.Key).ToList();
            Assert.True(twice.Count == 0, $"sent once, stored twice: {string.Join(", ", twice)} ({context})");
            var lost = acked.Except(received).ToList();
            Assert.True(lost.Count == 0, $"acknowledged but never received: {string.Join(", ", lost)} ({context})");
            // A send the SDK saw fail may have been stored (its outcome is unknown); nothing else may come.
            var strangers = received.Except(acked).Except(unknown).ToList();
            Assert.True(strangers.Count == 0, $"received, yet never sent: {string.Join(", ", strangers)} ({context})");
        }
        finally
        {
            Directory.Delete(signals, recursive: true);
        }
    }
}
