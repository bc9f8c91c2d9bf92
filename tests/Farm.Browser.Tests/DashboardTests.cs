using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Farm.Client;
using Farm.EndToEnd.Tests;
using Farm.Testing;
using Microsoft.Playwright;
using Xunit.Abstractions;

namespace Farm.Browser.Tests;

/// <summary>
/// The dashboard of a real 3-node farm in Debian's headless Chromium, driven by Playwright as a
/// person would use it: the page's kill button kills node 2 (SIGKILL, through the farm CLI) and its
/// containers show up under the survivors; the ordering switch turns SupportOrdering on and the
/// topic's page says so; a dead-lettered message is resubmitted and the counts change. Bad input
/// through the page and its API gets a clear error and changes nothing. Screenshots of each step
/// go to TestResults/screenshots.
/// </summary>
public sealed class DashboardTests(ITestOutputHelper output)
{
    /// <summary>A dead node's containers are served again within this (heartbeat timeout, take, and the page's refresh).</summary>
    private static readonly TimeSpan FailoverBound = TimeSpan.FromSeconds(30);

    private static readonly string ScreenshotDirectory = Path.Combine(TestPaths.RepositoryRoot, "TestResults", "screenshots");

    private static string Chromium =>
        Environment.GetEnvironmentVariable("FARM_TEST_CHROMIUM") is { Length: > 0 } path ? path : "/usr/bin/chromium";

    [Fact]
    public async Task Dashboard_KillsANode_SwitchesOrdering_ResubmitsADeadLetter_AndRefusesBadInput()
    {
        Assert.True(File.Exists(Chromium), $"Chromium is not at {Chromium}; ./test.sh installs Debian's chromium (or set FARM_TEST_CHROMIUM).");
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        // Three containers, one per node once the farm has spread them.
        await admin.CreateContainerAsync();
        await admin.CreateContainerAsync();
        await admin.CreateTopicAsync(new CreateTopicOptions("orders"));
        await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions("orders", "billing"));
        await admin.CreateQueueAsync("invoices");
        await admin.CreateQueueAsync("empty");
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var sender = client.CreateSender("invoices"))
        {
            await sender.SendMessageAsync(new FarmMessage("invoice 17") { MessageId = "invoice-17", Subject = "invoice" });
        }
        await using (var receiver = client.CreateReceiver("invoices"))
        {
            var message = await receiver.ReceiveMessageAsync(TimeSpan.FromSeconds(30)) ?? throw new InvalidOperationException("the invoice did not arrive");
            await receiver.DeadLetterMessageAsync(message, "BadTotal", "the total does not add up");
        }
        // Traffic for the rates and the chart: a sender and a receiver on their own queue, all along.
        await admin.CreateQueueAsync("traffic");
        using var stopTraffic = new CancellationTokenSource();
        var traffic = RunTrafficAsync(client, "traffic", stopTraffic.Token);

        // Node 2 must own something for its death to show; the farm spreads containers over the three.
        var ownedByTwo = await LocalFarm.WaitForContainerOwnedByAsync(admin, 2);
        var node1 = (await admin.GetFarmStatusAsync()).Nodes.Single(n => n.Id == 1);
        Assert.False(string.IsNullOrEmpty(node1.MetricsUrl), "node 1 reports no HTTP address");
        var dashboard = node1.MetricsUrl![..^"metrics".Length];

        using var playwright = await Playwright.CreateAsync();
        await using var browser = await playwright.Chromium.LaunchAsync(new() { ExecutablePath = Chromium, Headless = true });
        var page = await browser.NewPageAsync(new() { ViewportSize = new() { Width = 1400, Height = 1000 } });
        page.Dialog += (_, dialog) => dialog.AcceptAsync();
        page.SetDefaultTimeout((float)FailoverBound.TotalMilliseconds);
        await page.GotoAsync(dashboard);

        // The whole farm from node 1: three live nodes, every container under its owner.
        await Assertions.Expect(page.GetByTestId("connection")).ToHaveTextAsync("live");
        foreach (var id in new[] { 1, 2, 3 })
        {
            await Assertions.Expect(page.GetByTestId($"node-{id}")).ToHaveAttributeAsync("data-live", "true");
        }
        await Assertions.Expect(page.GetByTestId("node-2-containers").GetByTestId($"container-{ownedByTwo.Id}")).ToBeVisibleAsync();
        await Assertions.Expect(page.GetByTestId("queue-invoices-dead-letters")).ToHaveTextAsync("1");
        // Rates come from the nodes' Prometheus counters: the traffic queue's show, the idle queue's stay 0.
        // They may wait for the traffic's container to settle where the farm spreads it (its sends
        // fail over meanwhile) and for two scrapes after: on a machine busy with other tests that took
        // more than Playwright's default 5 s once (clean-clone run, session 33).
        var settled = new LocatorAssertionsToHaveTextOptions { Timeout = (float)FailoverBound.TotalMilliseconds };
        await Assertions.Expect(page.GetByTestId("queue-traffic-send-rate")).Not.ToHaveTextAsync("0", settled);
        await Assertions.Expect(page.GetByTestId("queue-traffic-receive-rate")).Not.ToHaveTextAsync("0", settled);
        await Assertions.Expect(page.GetByTestId("queue-empty-send-rate")).ToHaveTextAsync("0");
        await ScreenshotAsync(page, "1-farm");

        // A row that did not change is not drawn again when the next view comes (the traffic queue's
        // is): a click on its buttons cannot fall between two drawings and be lost.
        await page.EvaluateAsync("() => { document.querySelector('[data-testid=queue-invoices]').farmMark = 1; }");
        var updated = await page.Locator("#updated").TextContentAsync();
        await Assertions.Expect(page.Locator("#updated")).Not.ToHaveTextAsync(updated!);
        Assert.True(await page.EvaluateAsync<bool>("() => document.querySelector('[data-testid=queue-invoices]').farmMark === 1"),
            "the invoices row was drawn again although nothing in it changed");
        // A card whose figures change (node 1's heartbeat age, every view) keeps its buttons: only
        // the figures' text is set, so a click on its kill button cannot be lost either.
        await page.EvaluateAsync("() => { document.querySelector('[data-testid=node-1-kill]').farmMark = 1; }");
        var facts = await page.GetByTestId("node-1").Locator(".facts").TextContentAsync();
        await Assertions.Expect(page.GetByTestId("node-1").Locator(".facts")).Not.ToHaveTextAsync(facts!);
        Assert.True(await page.EvaluateAsync<bool>("() => document.querySelector('[data-testid=node-1-kill]').farmMark === 1"),
            "node 1's kill button was replaced when only its card's figures changed");

        // Kill node 2 with the page's control: its containers appear under the survivors.
        var node2Pid = farm.NodePid(2) ?? throw new InvalidOperationException("farm.json has no pid for node 2");
        await page.GetByTestId("node-2-kill").ClickAsync();
        await Assertions.Expect(page.GetByTestId("notice")).ToContainTextAsync("killed");
        Assert.False(LocalFarm.IsRunning(node2Pid), "node 2's process still runs after the page killed it");
        await Assertions.Expect(page.GetByTestId("node-2")).ToHaveAttributeAsync("data-live", "false");
        await Assertions.Expect(page.Locator($"[data-testid=node-1-containers] [data-testid=container-{ownedByTwo.Id}], [data-testid=node-3-containers] [data-testid=container-{ownedByTwo.Id}]"))
            .ToBeVisibleAsync();
        await Assertions.Expect(page.GetByTestId("node-2-containers")).ToContainTextAsync("no containers");
        await Assertions.Expect(page.GetByTestId("timeline").Locator("tr[data-kind=failover]").First).ToBeVisibleAsync();
        var moved = (await admin.GetContainersAsync()).Single(c => c.Id == ownedByTwo.Id);
        Assert.True(moved.OwnerNode is 1 or 3, $"container {moved.Id} is owned by {moved.OwnerNode} after node 2 died");
        await ScreenshotAsync(page, "2-node-2-killed");

        // Switch ordering on the topic: the table and the topic's page say so, and so does the farm.
        await Assertions.Expect(page.GetByTestId("topic-orders-ordering")).ToHaveTextAsync("off");
        await page.GetByTestId("topic-orders-ordering-switch").ClickAsync();
        // Right after the kill the update may wait for the topic's container to be served again.
        await Assertions.Expect(page.GetByTestId("notice")).ToContainTextAsync("SupportOrdering is on", new() { Timeout = (float)FailoverBound.TotalMilliseconds });
        await Assertions.Expect(page.GetByTestId("topic-orders-ordering")).ToHaveTextAsync("on");
        await page.GetByTestId("topic-orders").Locator("a.entity").ClickAsync();
        await Assertions.Expect(page.GetByTestId("detail-summary")).ToContainTextAsync("SupportOrdering is on");
        Assert.True((await admin.GetTopicAsync("orders")).SupportOrdering);
        await ScreenshotAsync(page, "3-ordering-on");

        // Look into the dead-letter queue, resubmit the message: the counts change.
        await page.GetByTestId("queue-invoices").GetByRole(AriaRole.Button, new() { Name = "dead letters" }).ClickAsync();
        var deadLetter = page.GetByTestId("messages").Locator("tbody tr").First;
        await Assertions.Expect(deadLetter).ToContainTextAsync("invoice 17");
        await Assertions.Expect(deadLetter).ToContainTextAsync("BadTotal");
        await ScreenshotAsync(page, "4-dead-letters");
        await deadLetter.GetByRole(AriaRole.Button, new() { Name = "resubmit" }).ClickAsync();
        await Assertions.Expect(page.GetByTestId("notice")).ToContainTextAsync("1 dead-lettered message(s) of invoices resubmitted");
        await Assertions.Expect(page.GetByTestId("queue-invoices-dead-letters")).ToHaveTextAsync("0");
        await Assertions.Expect(page.GetByTestId("queue-invoices-active")).ToHaveTextAsync("1");
        var counts = await farm.GetQueueCountsAsync("invoices");
        Assert.Equal((1, 0), (counts.ActiveMessageCount, counts.DeadLetterMessageCount));
        await ScreenshotAsync(page, "5-resubmitted");

        // Bad input through the page: a move to the dead node, a resubmit from an empty dead-letter queue.
        await page.GetByTestId("move-container").SelectOptionAsync(ownedByTwo.Id.ToString(System.Globalization.CultureInfo.InvariantCulture));
        await page.GetByTestId("move-to").SelectOptionAsync("2");
        await page.GetByTestId("move-form").GetByRole(AriaRole.Button, new() { Name = "Move" }).ClickAsync();
        await Assertions.Expect(page.GetByTestId("notice")).ToHaveClassAsync("error");
        await Assertions.Expect(page.GetByTestId("notice")).ToContainTextAsync("Node 2 is not a live, active node");
        await ScreenshotAsync(page, "6-bad-move");
        Assert.Equal(moved.OwnerNode, (await admin.GetContainersAsync()).Single(c => c.Id == ownedByTwo.Id).OwnerNode);

        await page.GetByTestId("queue-empty").GetByRole(AriaRole.Button, new() { Name = "dead letters" }).ClickAsync();
        await page.GetByTestId("resubmit-all").ClickAsync();
        await Assertions.Expect(page.GetByTestId("notice")).ToContainTextAsync("empty has no dead-lettered messages to resubmit");
        await Assertions.Expect(page.GetByTestId("notice")).ToHaveClassAsync("error");

        // And through the API, as a script would call it.
        using var http = new HttpClient { BaseAddress = new Uri(dashboard) };
        http.DefaultRequestHeaders.Add("X-Farm-Dashboard", "1");
        await AssertErrorAsync(await http.PostAsync("api/nodes/9/kill", null), HttpStatusCode.BadRequest, "There is no node 9");
        await AssertErrorAsync(await http.PostAsync("api/nodes/1/explode", null), HttpStatusCode.BadRequest, "'explode' is not a node action");
        await AssertErrorAsync(await http.PostAsJsonAsync($"api/containers/{ownedByTwo.Id}/move", new { toNode = 2 }), HttpStatusCode.BadRequest, "Node 2 is not a live, active node");
        await AssertErrorAsync(await http.PostAsJsonAsync("api/dead-letters/resubmit", new { entity = "empty" }), HttpStatusCode.Conflict, "no dead-lettered messages");
        await AssertErrorAsync(await http.PostAsJsonAsync("api/dead-letters/resubmit", new { entity = "nope" }), HttpStatusCode.NotFound, "nope");
        await AssertErrorAsync(await http.PostAsync("api/entities", new StringContent("{not json", System.Text.Encoding.UTF8, "application/json")), HttpStatusCode.BadRequest, "not the JSON");
        using (var withoutHeader = new HttpClient { BaseAddress = new Uri(dashboard) })
        {
            await AssertErrorAsync(await withoutHeader.PostAsync("api/nodes/1/drain", null), HttpStatusCode.BadRequest, "X-Farm-Dashboard");
        }
        var after = await admin.GetFarmStatusAsync();
        Assert.Equal(NodeStates("active", "active"), after.Nodes.Where(n => n.Id != 2).Select(n => n.State).ToList());
        counts = await farm.GetQueueCountsAsync("invoices");
        Assert.Equal((1, 0), (counts.ActiveMessageCount, counts.DeadLetterMessageCount));

        // Start node 2 again from the page; it comes back live.
        await page.GetByTestId("node-2-start").ClickAsync();
        // The notice comes once the started node serves (`farm node start` waits for it): a process
        // start, seconds on a busy 2-core machine, not the page's 5 s default.
        await Assertions.Expect(page.GetByTestId("notice")).ToContainTextAsync("node 2 started", new() { Timeout = 60_000 });
        await Assertions.Expect(page.GetByTestId("node-2")).ToHaveAttributeAsync("data-live", "true");
        await ScreenshotAsync(page, "7-node-2-back");

        // The farm gives node 2 its share back by a planned move, which the timeline tells from the failover.
        await Assertions.Expect(page.GetByTestId("node-2-containers").Locator(".container").First).ToBeVisibleAsync(new() { Timeout = 90_000 });
        await Assertions.Expect(page.GetByTestId("timeline").Locator("tr[data-kind=planned]").First).ToBeVisibleAsync();
        await Assertions.Expect(page.GetByTestId("queue-traffic-active")).ToBeVisibleAsync();
        await page.GetByTestId("queue-traffic").Locator("a.entity").ClickAsync();
        await Assertions.Expect(page.GetByTestId("messages").Locator("tbody tr").First).ToBeVisibleAsync();
        await ScreenshotAsync(page, "8-rebalanced");

        stopTraffic.Cancel();
        var (sent, received) = await traffic;
        Assert.True(sent > 0 && received > 0, $"the traffic loop sent {sent} and received {received}");
    }

    /// <summary>
    /// Sends a small batch and receives what is there, paced at about 10 batches a second, until
    /// stopped; a send or receive that fails while a node dies is tried again on the next round.
    /// </summary>
    private static async Task<(long Sent, long Received)> RunTrafficAsync(FarmClient client, string queue, CancellationToken stop)
    {
        long sent = 0, received = 0;
        await using var sender = client.CreateSender(queue);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        using var pacing = new PeriodicTimer(TimeSpan.FromMilliseconds(100));
        try
        {
            while (await pacing.WaitForNextTickAsync(stop))
            {
                try
                {
                    await sender.SendMessagesAsync([.. Enumerable.Range(0, 5).Select(i => new FarmMessage($"{{\"order\": {sent + i}}}") { ContentType = "application/json" })], stop);
                    sent += 5;
                    received += (await receiver.ReceiveMessagesAsync(4, TimeSpan.FromMilliseconds(50), stop)).Count;
                }
                catch (FarmException e) when (e.IsTransient)
                {
                    // A node is dying or a container moving: the next round tries again.
                }
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
        }
        return (sent, received);
    }

    private static List<string> NodeStates(params string[] states) => [.. states];

    private static async Task AssertErrorAsync(HttpResponseMessage response, HttpStatusCode status, string text)
    {
        var body = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == status, $"expected {status}, got {response.StatusCode}: {body}");
        using var json = JsonDocument.Parse(body);
        Assert.Contains(text, json.RootElement.GetProperty("error").GetString(), StringComparison.Ordinal);
    }

    private async Task ScreenshotAsync(IPage page, string name)
    {
        Directory.CreateDirectory(ScreenshotDirectory);
        var path = Path.Combine(ScreenshotDirectory, $"dashboard-{name}.png");
        await page.ScreenshotAsync(new() { Path = path, FullPage = true });
        output.WriteLine($"screenshot: {path}");
    }
}
