using System.Collections.Concurrent;
using Farm.Testing;
using Farm.Client;
using Farm.Contracts.V1;
using Grpc.Core;
using Microsoft.Extensions.DependencyInjection;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A send whose answer was lost is tried again with the same producer and send id, and the node
/// stores it once: a real node process answers the repeat (by Send call or on the stream) with the
/// first try's sequence numbers, and the SDK keeps one pair across the tries of a send.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class RepeatedSendTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private async Task<string> CreateQueueAsync()
    {
        var name = "repeat-" + Guid.NewGuid().ToString("N")[..12];
        using var admin = new FarmAdministrationClient(fixture.Farm.ConnectionString);
        await admin.CreateQueueAsync(name);
        return name;
    }

    private static SendRequest Send(string queue, string producer, long sendId, string messageId) =>
        new() { Entity = queue, ProducerId = producer, SendId = sendId, Messages = { new Message { MessageId = messageId } } };

    /// <summary>
    /// The same send three times (a Send call, the call again, then on a SendStream, as a client
    /// falling back between them would) is stored once and each try is told its sequence number;
    /// another send id from the same producer is a send of its own.
    /// </summary>
    [Fact]
    public async Task ASendTriedAgain_ByCallOrOnTheStream_IsStoredOnce()
    {
        var queue = await CreateQueueAsync();
        var producer = Guid.NewGuid().ToString("N");
        using var channel = Farm.Contracts.FarmChannels.Create(new Uri(fixture.Farm.Address));
        var messaging = new Messaging.MessagingClient(channel);

        var first = await messaging.SendAsync(Send(queue, producer, 1, "once"));
        var again = await messaging.SendAsync(Send(queue, producer, 1, "once"));
        using var stream = messaging.SendStream();
        await stream.RequestStream.WriteAsync(new SendStreamRequest { Sends = { new StreamedSend { Id = 9, Send = Send(queue, producer, 1, "once") } } });
        await stream.RequestStream.CompleteAsync();
        var streamed = new List<StreamedSendResult>();
        await foreach (var response in stream.ResponseStream.ReadAllAsync().WithCancellation(new CancellationTokenSource(Patience).Token))
        {
            streamed.AddRange(response.Results);
        }
        var other = await messaging.SendAsync(Send(queue, producer, 2, "other"));

        var sequence = Assert.Single(first.SequenceNumbers);
        Assert.Equal(sequence, Assert.Single(again.SequenceNumbers));
        Assert.Equal(sequence, Assert.Single(Assert.Single(streamed).Response.SequenceNumbers));
        Assert.NotEqual(sequence, Assert.Single(other.SequenceNumbers));

        await using var client = new FarmClient(fixture.Farm.ConnectionString);
        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        using var deadline = new CancellationTokenSource(Patience);
        var ids = new List<string>();
        while (ids.Count < 2)
        {
            ids.AddRange((await receiver.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(2), deadline.Token)).Select(m => m.MessageId!));
        }
        Assert.Empty(await receiver.ReceiveMessagesAsync(10, TimeSpan.FromMilliseconds(300), deadline.Token));
        Assert.Equal(["once", "other"], ids.Order());
    }

    /// <summary>
    /// Concurrent SDK senders while the node's TCP connections are cut three times (`ss -K`, as a
    /// network fault or a keep-alive timeout cuts them): sends whose answers were lost are sent again,
    /// and every acknowledged message is received exactly once. Without the send ids the retries of
    /// sends already stored were stored twice (`perf single-queue` with the same cuts: 50 and 100
    /// duplicates against the node before the change, 0 after).
    /// </summary>
    [Fact]
    public async Task SendsWhoseConnectionIsCut_AreStoredOnce()
    {
        var queue = await CreateQueueAsync();
        var port = new Uri(fixture.Farm.Address).Port;
        await using var client = new FarmClient(fixture.Farm.ConnectionString,
            new FarmClientOptions { RetryOptions = new FarmRetryOptions { Delay = TimeSpan.FromMilliseconds(50), MaxRetries = 10 } });
        var acknowledged = new ConcurrentBag<string>();
        using var sending = new CancellationTokenSource();
        var senders = Enumerable.Range(0, 8).Select(s => Task.Run(async () =>
        {
            var sender = client.CreateSender(queue);
            for (var i = 0; !sending.IsCancellationRequested; i++)
            {
                var id = $"s{s}-{i}";
                await sender.SendMessageAsync(new FarmMessage("x") { MessageId = id });
                acknowledged.Add(id);
            }
        })).ToList();

        var cut = 0;
        for (var round = 0; round < 3; round++)
        {
            var before = acknowledged.Count;
            await Eventually.UntilAsync(() => acknowledged.Count >= before + 200, Patience, "sends going before the cut");
            cut += TcpCuts.To(port);
        }
        await Eventually.UntilAsync(() => acknowledged.Count >= 600, Patience, "sends going after the cuts");
        await sending.CancelAsync();
        await Task.WhenAll(senders).WaitAsync(Patience);

        Assert.True(cut >= 3, $"ss -K cut {cut} connections");
        var received = new List<string>();
        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        using var deadline = new CancellationTokenSource(Patience);
        while (received.Count < acknowledged.Count)
        {
            received.AddRange((await receiver.ReceiveMessagesAsync(500, TimeSpan.FromSeconds(2), deadline.Token)).Select(m => m.MessageId!));
        }
        Assert.Empty(await receiver.ReceiveMessagesAsync(10, TimeSpan.FromMilliseconds(500), deadline.Token));
        Assert.Empty(received.GroupBy(id => id).Where(g => g.Count() > 1).Select(g => g.Key));
        Assert.Equal(acknowledged.Order(), received.Order());
    }

    /// <summary>
    /// The SDK against a node whose stream breaks (UNAVAILABLE) after each send's first try, on a
    /// real socket: every send succeeds on a later try, all tries of one send carry the same
    /// producer and send id, and no two sends share a send id.
    /// </summary>
    [Fact]
    public async Task TheSdk_KeepsOnePairAcrossTheTriesOfASend_AndANewSendIdPerSend()
    {
        await using var app = await InProcessNode.ServeAsync<BreaksEachFirstTryNode>();
        var node = app.Services.GetRequiredService<BreaksEachFirstTryNode>();
        await using var client = new FarmClient($"Endpoint={app.Urls.Single()}",
            new FarmClientOptions { RetryOptions = new FarmRetryOptions { Delay = TimeSpan.FromMilliseconds(20), MaxRetries = 5 } });
        var sender = client.CreateSender("q");

        for (var i = 0; i < 3; i++)
        {
            await sender.SendMessageAsync(new FarmMessage($"m{i}")).WaitAsync(Patience);
        }

        var tries = node.Tries.ToList();
        Assert.Equal(3, tries.Select(t => t.Body).Distinct().Count());
        foreach (var send in tries.GroupBy(t => t.Body))
        {
            Assert.True(send.Count() >= 2, $"{send.Key} was tried {send.Count()} times");
            var pair = Assert.Single(send.Select(t => (t.Producer, t.SendId)).Distinct());
            Assert.NotEmpty(pair.Producer);
        }
        Assert.Single(tries.Select(t => t.Producer).Distinct());
        Assert.Equal(3, tries.Select(t => t.SendId).Distinct().Count());
    }

    /// <summary>
    /// Sends over the stream (or by call): the first try of each pair breaks the stream or fails the
    /// call with UNAVAILABLE, as a lost connection does; a later try is answered.
    /// </summary>
    private sealed class BreaksEachFirstTryNode : Messaging.MessagingBase
    {
        private long _sequence;

        public ConcurrentQueue<(string Body, string Producer, long SendId)> Tries { get; } = new();

        private bool FirstTry(SendRequest send)
        {
            var seen = Tries.Any(t => t.Producer == send.ProducerId && t.SendId == send.SendId);
            Tries.Enqueue((send.Messages[0].Body.ToStringUtf8(), send.ProducerId, send.SendId));
            return !seen;
        }

        private SendResponse Answer() => new() { SequenceNumbers = { Interlocked.Increment(ref _sequence) } };

        public override Task<SendResponse> Send(SendRequest request, ServerCallContext context) =>
            FirstTry(request) ? throw new RpcException(new Status(StatusCode.Unavailable, "lost")) : Task.FromResult(Answer());

        public override async Task SendStream(IAsyncStreamReader<SendStreamRequest> requestStream, IServerStreamWriter<SendStreamResponse> responseStream, ServerCallContext context)
        {
            await foreach (var request in requestStream.ReadAllAsync(context.CancellationToken))
            {
                foreach (var send in request.Sends)
                {
                    if (FirstTry(send.Send))
                    {
                        throw new RpcException(new Status(StatusCode.Unavailable, "the stream broke"));
                    }
                    await responseStream.WriteAsync(new SendStreamResponse { Results = { new StreamedSendResult { Id = send.Id, Response = Answer() } } });
                }
            }
        }
    }
}
