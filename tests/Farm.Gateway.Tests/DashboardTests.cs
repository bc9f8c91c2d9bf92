using System.Net;
using Farm.Gateway.Dashboard;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Gateway.Tests;

/// <summary>
/// The dashboard's own logic, in isolation: who may use its controls (loopback only unless the node
/// opens them), and how it reads per-entity totals out of a node's Prometheus exposition. The page
/// itself is tested in a real browser against a real farm (tests/Farm.Browser.Tests).
/// </summary>
public sealed class DashboardTests
{
    private static HttpContext CallFrom(string address, bool remoteControl)
    {
        var services = new ServiceCollection().AddSingleton(new DashboardOptions { RemoteControl = remoteControl }).BuildServiceProvider();
        var context = new DefaultHttpContext { RequestServices = services };
        context.Connection.RemoteIpAddress = IPAddress.Parse(address);
        return context;
    }

    [Theory]
    [InlineData("127.0.0.1", false, true)]
    [InlineData("::1", false, true)]
    [InlineData("::ffff:127.0.0.1", false, true)]
    [InlineData("192.0.2.7", false, false)]
    [InlineData("::ffff:192.0.2.7", false, false)]
    [InlineData("2001:db8::7", false, false)]
    [InlineData("192.0.2.7", true, true)]
    public void Controls_AnswerLoopbackOnly_UnlessTheNodeOpensThem(string caller, bool remoteControl, bool allowed) =>
        Assert.Equal(allowed, DashboardEndpoints.MayControl(CallFrom(caller, remoteControl)));

    [Fact]
    public void Rates_ReadTheSentAndReceivedTotalsPerDestination_FromAPrometheusExposition()
    {
        const string exposition = """
            # TYPE farm_messages_sent_total counter
            farm_messages_sent_total{otel_scope_name="Farm.Broker",messaging_destination_name="orders",messaging_system="farm"} 120 1732521600000
            farm_messages_sent_total{messaging_destination_name="odd \"name\\ here",messaging_system="farm"} 3
            farm_messages_received_total{messaging_destination_name="t/Subscriptions/s",messaging_system="farm"} 7.5e1
            farm_messages_completed_total{messaging_destination_name="orders",messaging_system="farm"} 99
            farm_messages_sent_total_extra{messaging_destination_name="orders"} 5
            farm_messages_sent_total{messaging_system="farm"} 4
            """;

        var totals = EntityRates.ParseTotals(exposition);

        Assert.Equal(120, totals[("farm_messages_sent_total", "orders")]);
        Assert.Equal(3, totals[("farm_messages_sent_total", "odd \"name\\ here")]);
        Assert.Equal(75, totals[("farm_messages_received_total", "t/Subscriptions/s")]);
        Assert.Equal(3, totals.Count);
    }

    [Fact]
    public async Task Rates_AreTheGrowthBetweenTwoScrapes_CountingANewOrResetCounterFromZero()
    {
        var served = new Queue<string>([
            "farm_messages_sent_total{messaging_destination_name=\"q\"} 100\nfarm_messages_received_total{messaging_destination_name=\"q\"} 50\n",
            "farm_messages_sent_total{messaging_destination_name=\"q\"} 300\nfarm_messages_received_total{messaging_destination_name=\"q\"} 10\n"
                + "farm_messages_sent_total{messaging_destination_name=\"moved-here\"} 40\n",
        ]);
        using var http = new HttpClient(new Answering(() => served.Dequeue()));
        var time = new FakeTimeProvider();
        var rates = new EntityRates(http, time);

        var first = await rates.ScrapeAsync([(1, "http://node-1/metrics")], CancellationToken.None);
        time.Advance(TimeSpan.FromSeconds(2));
        var second = await rates.ScrapeAsync([(1, "http://node-1/metrics")], CancellationToken.None);

        Assert.Empty(first.Send);
        Assert.Equal(100, second.Send["q"]);
        Assert.Equal(5, second.Receive["q"]);
        Assert.Equal(20, second.Send["moved-here"]);
    }

    private sealed class Answering(Func<string> body) : HttpMessageHandler
    {
        protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken) =>
            Task.FromResult(new HttpResponseMessage(HttpStatusCode.OK) { Content = new StringContent(body()) });
    }
}
