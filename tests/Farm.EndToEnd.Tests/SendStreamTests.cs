using Farm.Client;
using Farm.Testing;
using Farm.Contracts.V1;
using Grpc.Core;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The SDK's sends go over one SendStream per endpoint, shared by every sender of a client: each
/// send still gets its own outcome, and a node that predates the stream gets Send calls instead.
/// A real node process (its own, so its count of Send calls is this class's alone).
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class SendStreamTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private string Connection => fixture.Farm.ConnectionString;

    private async Task<string> CreateQueueAsync()
    {
        var name = "stream-" + Guid.NewGuid().ToString("N")[..12];
        using var admin = new FarmAdministrationClient(Connection);
        await admin.CreateQueueAsync(name);
        return name;
    }

    /// <summary>Send calls the node has served.</summary>
    private Task<double> SendCallsAsync() => fixture.Farm.MessagingCallsAsync("Send");

    private static async Task<List<string>> ReceiveAllAsync(FarmClient client, string queue, int count)
    {
        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        using var deadline = new CancellationTokenSource(Patience);
        var ids = new List<string>();
        while (ids.Count < count)
        {
            var batch = await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(2), deadline.Token);
            ids.AddRange(batch.Select(m => m.MessageId!));
        }
        // Nothing more than was sent: each acknowledged send stored once.
        Assert.Empty(await receiver.ReceiveMessagesAsync(10, TimeSpan.FromMilliseconds(300), deadline.Token));
        return ids;
    }

    /// <summary>
    /// Hundreds of concurrent sends from one client, to two queues and to one that does not exist:
    /// each send to a queue gets its own sequence number and is stored once, each to the missing
    /// queue fails as a Send call would (MessagingEntityNotFound), and the node served no Send call
    /// for any of them. The same sends with the stream off are Send calls, which the count sees.
    /// </summary>
    [Fact]
    public async Task ConcurrentSendsOfOneClient_GoOverTheStream_EachWithItsOwnOutcome()
    {
        const int perQueue = 150;
        var queues = new[] { await CreateQueueAsync(), await CreateQueueAsync() };
        var sendCallsBefore = await SendCallsAsync();

        await using var client = new FarmClient(Connection);
        var senders = queues.Select(client.CreateSender).ToList();
        var missing = client.CreateSender("stream-missing-" + Guid.NewGuid().ToString("N")[..8]);
        var sends = Enumerable.Range(0, perQueue).SelectMany(i => senders.Select((sender, q) => (q, Task: sender.SendMessageAsync(new FarmMessage($"m{i}") { MessageId = $"{q}-{i}" })))).ToList();
        var failing = Enumerable.Range(0, 5).Select(i => missing.SendMessageAsync(new FarmMessage("lost") { MessageId = $"x-{i}" })).ToList();

        await Task.WhenAll(sends.Select(s => s.Task));
        foreach (var group in sends.GroupBy(s => s.q))
        {
            var numbers = group.Select(s => s.Task.Result).ToList();
            Assert.All(numbers, n => Assert.True(n > 0));
            Assert.Equal(perQueue, numbers.Distinct().Count());
        }
        foreach (var failed in failing)
        {
            var error = await Assert.ThrowsAsync<FarmException>(() => failed);
            Assert.Equal(FarmFailureReason.MessagingEntityNotFound, error.Reason);
        }
        for (var q = 0; q < queues.Length; q++)
        {
            var ids = await ReceiveAllAsync(client, queues[q], perQueue);
            Assert.Equal(Enumerable.Range(0, perQueue).Select(i => $"{q}-{i}").Order(), ids.Order());
        }
        Assert.Equal(sendCallsBefore, await SendCallsAsync());

        // The count is real: the same kind of sends, one call each.
        await using var callingClient = new FarmClient(Connection, new FarmClientOptions { SendOverStream = false });
        await using var callingSender = callingClient.CreateSender(queues[0]);
        await Task.WhenAll(Enumerable.Range(0, 3).Select(i => callingSender.SendMessageAsync(new FarmMessage("by call") { MessageId = $"call-{i}" })));
        await Eventually.UntilAsync(async () => await SendCallsAsync() >= sendCallsBefore + 3, Patience, "the node to count 3 Send calls");
    }

    /// <summary>
    /// Bad input on the raw stream (promise 6): a streamed send with no send, or with a negative
    /// timeout, is answered INVALID_ARGUMENT for itself alone, and a good send beside them is stored.
    /// </summary>
    [Fact]
    public async Task MalformedStreamedSends_AreEachRefusedAsInvalid_WhileAGoodOneBesideThemIsStored()
    {
        var queue = await CreateQueueAsync();
        using var channel = Farm.Contracts.FarmChannels.Create(new Uri(fixture.Farm.Address));
        using var call = new Messaging.MessagingClient(channel).SendStream();
        await call.RequestStream.WriteAsync(new SendStreamRequest
        {
            Sends =
            {
                new StreamedSend { Id = 1 },
                new StreamedSend { Id = 2, Send = new SendRequest { Entity = queue, Messages = { new Message { MessageId = "bad" } } }, Timeout = new Google.Protobuf.WellKnownTypes.Duration { Seconds = -5 } },
                new StreamedSend { Id = 3, Send = new SendRequest { Entity = queue, Messages = { new Message { MessageId = "good" } } } },
            },
        });
        await call.RequestStream.CompleteAsync();
        var results = new Dictionary<long, StreamedSendResult>();
        await foreach (var response in call.ResponseStream.ReadAllAsync().WithCancellation(new CancellationTokenSource(Patience).Token))
        {
            foreach (var result in response.Results)
            {
                results.Add(result.Id, result);
            }
        }

        Assert.Equal([1L, 2L, 3L], results.Keys.Order());
        foreach (var id in new[] { 1L, 2L })
        {
            Assert.Equal((int)StatusCode.InvalidArgument, results[id].Failure.StatusCode);
            Assert.Equal(FarmErrorCode.InvalidArgument, results[id].Failure.ErrorCode);
        }
        Assert.Null(results[3].Failure);
        await using var client = new FarmClient(Connection);
        Assert.Equal(["good"], await ReceiveAllAsync(client, queue, 1));
    }

    /// <summary>
    /// A node that predates SendStream (here a gRPC server with only Send, on a real socket)
    /// answers the stream UNIMPLEMENTED: the client sends by Send calls from then on, and the
    /// sends that were on the stream get their answers from those calls.
    /// </summary>
    [Fact]
    public async Task AgainstANodeWithoutTheStream_SendsFallBackToSendCalls()
    {
        await using var app = await InProcessNode.ServeAsync<SendOnlyNode>();
        var address = app.Urls.Single();
        var node = app.Services.GetRequiredService<SendOnlyNode>();

        await using var client = new FarmClient($"Endpoint={address}");
        await using var sender = client.CreateSender("old");
        var numbers = await Task.WhenAll(Enumerable.Range(0, 5).Select(i => sender.SendMessageAsync(new FarmMessage($"m{i}"))));
        var more = await sender.SendMessageAsync(new FarmMessage("after"));

        Assert.Equal(6, node.Calls);
        Assert.Equal(Enumerable.Range(1, 6).Select(n => (long)n), numbers.Append(more).Order());
        await app.StopAsync();
    }

    /// <summary>
    /// Each send on the stream carries the time its client still waits (so a node gives it up
    /// then, as a call's deadline does) and is given up on its own at that deadline: a send the
    /// node never answers fails as ServiceTimeout while another send on the same stream succeeds.
    /// A node whose SendStream answers only some sends, on a real socket.
    /// </summary>
    [Fact]
    public async Task ASendOnTheStream_CarriesItsTimeout_AndIsGivenUpAloneAtItsDeadline()
    {
        await using var app = await InProcessNode.ServeAsync<SilentToSlowNode>();
        var node = app.Services.GetRequiredService<SilentToSlowNode>();
        var tryTimeout = TimeSpan.FromSeconds(2);
        await using var client = new FarmClient($"Endpoint={app.Urls.Single()}",
            new FarmClientOptions { RetryOptions = new FarmRetryOptions { MaxRetries = 0, TryTimeout = tryTimeout } });

        var slow = client.CreateSender("slow").SendMessageAsync(new FarmMessage("never answered"));
        Assert.Equal(7, await client.CreateSender("fast").SendMessageAsync(new FarmMessage("answered")));
        var error = await Assert.ThrowsAsync<FarmException>(() => slow.WaitAsync(Patience));

        Assert.Equal(FarmFailureReason.ServiceTimeout, error.Reason);
        var timeout = Assert.Single(node.Timeouts, t => t.Entity == "slow").Timeout;
        Assert.InRange(timeout, TimeSpan.FromSeconds(1), tryTimeout);
    }

    /// <summary>A SendStream that answers sends to "fast" (sequence number 7) and never those to "slow", noting each send's timeout.</summary>
    private sealed class SilentToSlowNode : Messaging.MessagingBase
    {
        public System.Collections.Concurrent.ConcurrentBag<(string Entity, TimeSpan Timeout)> Timeouts { get; } = [];

        public override async Task SendStream(IAsyncStreamReader<SendStreamRequest> requestStream, IServerStreamWriter<SendStreamResponse> responseStream, ServerCallContext context)
        {
            await foreach (var request in requestStream.ReadAllAsync(context.CancellationToken))
            {
                foreach (var send in request.Sends)
                {
                    Timeouts.Add((send.Send.Entity, send.Timeout?.ToTimeSpan() ?? TimeSpan.Zero));
                    if (send.Send.Entity == "fast")
                    {
                        await responseStream.WriteAsync(new SendStreamResponse
                        {
                            Results = { new StreamedSendResult { Id = send.Id, Response = new SendResponse { SequenceNumbers = { 7 } } } },
                        });
                    }
                }
            }
        }
    }

    /// <summary>An older node's Messaging service: Send calls only, numbering messages as they come.</summary>
    private sealed class SendOnlyNode : Messaging.MessagingBase
    {
        private long _sequence;
        private int _calls;

        public int Calls => Volatile.Read(ref _calls);

        public override Task<SendResponse> Send(SendRequest request, ServerCallContext context)
        {
            Interlocked.Increment(ref _calls);
            var response = new SendResponse();
            foreach (var _ in request.Messages)
            {
                response.SequenceNumbers.Add(Interlocked.Increment(ref _sequence));
            }
            return Task.FromResult(response);
        }
    }
}
