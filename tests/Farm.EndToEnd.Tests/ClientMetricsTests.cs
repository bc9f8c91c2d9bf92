using Farm.Client;
using OpenTelemetry;
using OpenTelemetry.Metrics;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The client's duration histograms, collected through the OpenTelemetry SDK as an application
/// would: in seconds, with buckets that tell a 2 ms send from a 2 s one (the SDK's default buckets,
/// 0 to 10,000, are meant for milliseconds and put every operation in the first one).
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ClientMetricsTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    [Fact]
    public async Task SendDurations_AreRecordedInSeconds_InBucketsOfTheMessagingConventions()
    {
        var queue = "metered-" + Guid.NewGuid().ToString("N")[..10];
        using (var admin = new FarmAdministrationClient(fixture.Farm.ConnectionString))
        {
            await admin.CreateQueueAsync(queue);
        }

        var metrics = new List<Metric>();
        using var meters = Sdk.CreateMeterProviderBuilder().AddMeter("Farm.Client").AddInMemoryExporter(metrics).Build();
        await using (var client = new FarmClient(fixture.Farm.ConnectionString))
        await using (var sender = client.CreateSender(queue))
        {
            for (var i = 0; i < 5; i++)
            {
                await sender.SendMessageAsync(new FarmMessage($"m{i}"));
            }
        }
        // Read while the provider lives: disposing it exports (and adds to the list) once more.
        meters.ForceFlush();

        var duration = Assert.Single(metrics, m => m.Name == "messaging.client.operation.duration");
        Assert.Equal("s", duration.Unit);
        // Other tests send alongside: this queue's points only.
        var bounds = new List<double>();
        long count = 0;
        long underASecond = 0;
        foreach (var point in duration.GetMetricPoints())
        {
            if (!HasTag(point, "messaging.destination.name", queue))
            {
                continue;
            }
            count += point.GetHistogramCount();
            bounds.Clear();
            foreach (var bucket in point.GetHistogramBuckets())
            {
                bounds.Add(bucket.ExplicitBound);
                if (bucket.ExplicitBound <= 1)
                {
                    underASecond += bucket.BucketCount;
                }
            }
        }
        Assert.True(count >= 5, $"{count} send durations recorded for '{queue}', expected at least 5");
        Assert.Equal([0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, double.PositiveInfinity], bounds);
        // Five sends to a local node: seconds would put them under 1; milliseconds recorded as seconds would not.
        Assert.True(underASecond >= 5, $"only {underASecond} of {count} sends took under a second");
    }

    private static bool HasTag(MetricPoint point, string key, string value)
    {
        foreach (var tag in point.Tags)
        {
            if (tag.Key == key && Equals(tag.Value, value))
            {
                return true;
            }
        }
        return false;
    }
}
