using System.Diagnostics;
using Farm.Client;
using OpenTelemetry;
using OpenTelemetry.Trace;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A message carries its trace context (Diagnostic-Id / traceparent application properties, as
/// Azure Service Bus clients do): the send, and the processing of that message by a
/// <see cref="FarmProcessor"/>, are one trace, collected here with OpenTelemetry's in-memory exporter.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class TracingTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    [Fact]
    public async Task SendAndProcess_OfOneMessage_AreOneTrace_WithTheSendAnAncestorOfTheProcessing()
    {
        var queue = "traced-" + Guid.NewGuid().ToString("N")[..10];
        using (var admin = new FarmAdministrationClient(fixture.Farm.ConnectionString))
        {
            await admin.CreateQueueAsync(queue);
        }

        var spans = new List<Activity>();
        using (var tracing = Sdk.CreateTracerProviderBuilder().AddSource("Farm.Client").AddInMemoryExporter(spans).Build())
        {
            await using var client = new FarmClient(fixture.Farm.ConnectionString);
            await using (var sender = client.CreateSender(queue))
            {
                await sender.SendMessageAsync(new FarmMessage("traced") { MessageId = "traced-1" });
            }

            var processed = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
            await using var processor = client.CreateProcessor(queue);
            processor.ProcessMessageAsync += args =>
            {
                processed.TrySetResult(args.Message.MessageId ?? "");
                return Task.CompletedTask;
            };
            processor.ProcessErrorAsync += args =>
            {
                processed.TrySetException(args.Exception);
                return Task.CompletedTask;
            };
            await processor.StartProcessingAsync();
            Assert.Equal("traced-1", await processed.Task.WaitAsync(Patience));
            await processor.StopProcessingAsync();
            tracing.ForceFlush();
        }

        // Other tests run alongside and trace too: keep this queue's spans.
        var ours = spans.Where(s => Equals(s.GetTagItem("messaging.destination.name"), queue)).ToList();
        var send = Assert.Single(ours, s => s.DisplayName == $"send {queue}");
        var process = Assert.Single(ours, s => s.DisplayName == $"process {queue}");
        Assert.Equal(ActivityKind.Producer, send.Kind);
        Assert.Equal(ActivityKind.Consumer, process.Kind);
        Assert.Equal(send.TraceId, process.TraceId);
        Assert.True(IsAncestor(send, process, spans), $"the send span {send.SpanId} is not an ancestor of the process span (parent {process.ParentSpanId})");
    }

    private static bool IsAncestor(Activity ancestor, Activity span, IReadOnlyCollection<Activity> all)
    {
        var parent = span.ParentSpanId;
        while (parent != default)
        {
            if (parent == ancestor.SpanId)
            {
                return true;
            }
            parent = all.FirstOrDefault(s => s.SpanId == parent)?.ParentSpanId ?? default;
        }
        return false;
    }
}
