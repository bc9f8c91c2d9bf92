using System.Globalization;
using System.Text.RegularExpressions;
using Farm.Client;
using Farm.Testing;
using Farm.Contracts.V1;
using Grpc.Core;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The SDK's receivers share one ReceiveSession per endpoint, a link each: every receiver still
/// gets its own messages, settles them on its link, and fails on its own; a node that predates
/// sessions gets Receive calls instead. A real node process (its own, so its call counts are this
/// class's alone).
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ReceiveSessionTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private string Connection => fixture.Farm.ConnectionString;

    private async Task<string> CreateQueueAsync()
    {
        var name = "session-" + Guid.NewGuid().ToString("N")[..12];
        using var admin = new FarmAdministrationClient(Connection);
        await admin.CreateQueueAsync(name);
        return name;
    }

    private Task<double> CallsAsync(string method) => fixture.Farm.MessagingCallsAsync(method);

    /// <summary>
    /// Thirty peek-lock receivers of one client, on thirty queues, and one on a queue that does not
    /// exist: each receiver gets exactly its queue's messages and completes them (on its link), the
    /// missing queue's receiver fails alone (MessagingEntityNotFound), and the node served one
    /// ReceiveSession and no Receive call. The same receives with sessions off are Receive calls,
    /// which the count sees.
    /// </summary>
    [Fact]
    public async Task ManyReceiversOfOneClient_ShareOneSession_EachGettingAndSettlingItsOwnMessages()
    {
        const int queues = 30, perQueue = 4;
        var names = new List<string>();
        for (var q = 0; q < queues; q++)
        {
            names.Add(await CreateQueueAsync());
        }
        var receiveCallsBefore = await CallsAsync("Receive");
        var sessionsBefore = await CallsAsync("ReceiveSession");

        await using (var client = new FarmClient(Connection))
        {
            await Task.WhenAll(names.Select(async name =>
            {
                await using var sender = client.CreateSender(name);
                await sender.SendMessagesAsync(Enumerable.Range(0, perQueue).Select(i => new FarmMessage($"{name}/{i}") { MessageId = $"{name}/{i}" }));
            }));

            var missing = client.CreateReceiver("session-missing-" + Guid.NewGuid().ToString("N")[..8]);
            var missingFails = Assert.ThrowsAsync<FarmException>(() => missing.ReceiveMessageAsync(TimeSpan.FromSeconds(20)));
            var received = await Task.WhenAll(names.Select(async name =>
            {
                await using var receiver = client.CreateReceiver(name);
                using var deadline = new CancellationTokenSource(Patience);
                var ids = new List<string>();
                while (ids.Count < perQueue)
                {
                    foreach (var message in await receiver.ReceiveMessagesAsync(perQueue, TimeSpan.FromSeconds(5), deadline.Token))
                    {
                        await receiver.CompleteMessageAsync(message, deadline.Token);
                        ids.Add(message.MessageId!);
                    }
                }
                return (name, ids);
            }));
            Assert.Equal(FarmFailureReason.MessagingEntityNotFound, (await missingFails).Reason);

            foreach (var (name, ids) in received)
            {
                Assert.Equal(Enumerable.Range(0, perQueue).Select(i => $"{name}/{i}"), ids.Order());
            }
            // Completed, not just received: nothing is left to receive again once the locks would have run out.
            using var admin = new FarmAdministrationClient(Connection);
            foreach (var name in names)
            {
                Assert.Equal(0, (await admin.GetQueueRuntimePropertiesAsync(name)).TotalMessageCount);
            }
        }
        // A call is counted when it ends: the session ended with its client.
        await Eventually.UntilAsync(async () => await CallsAsync("ReceiveSession") >= sessionsBefore + 1, Patience, "the node to count the session");
        Assert.Equal(sessionsBefore + 1, await CallsAsync("ReceiveSession"));
        Assert.Equal(receiveCallsBefore, await CallsAsync("Receive"));

        // The count is real: the same receive with sessions off is a Receive call.
        await using (var callingClient = new FarmClient(Connection, new FarmClientOptions { ReceiveOverSession = false }))
        {
            await using var sender = callingClient.CreateSender(names[0]);
            await sender.SendMessageAsync(new FarmMessage("by call"));
            await using var receiver = callingClient.CreateReceiver(names[0], new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
            Assert.NotNull(await receiver.ReceiveMessageAsync(Patience));
        }
        await Eventually.UntilAsync(async () => await CallsAsync("Receive") >= receiveCallsBefore + 1, Patience, "the node to count a Receive call");
    }

    /// <summary>The node's farm_entity_receivers gauge for <paramref name="queue"/>; null when it has none.</summary>
    private async Task<double?> ReceiversAsync(string queue)
    {
        var text = await fixture.Farm.SingleNodeMetricsAsync();
        var match = Regex.Match(text, $@"^farm_entity_receivers\{{[^}}]*messaging_destination_name=""{Regex.Escape(queue)}""[^}}]*\}} ([0-9.eE+]+)", RegexOptions.Multiline);
        return match.Success ? double.Parse(match.Groups[1].Value, CultureInfo.InvariantCulture) : null;
    }

    /// <summary>
    /// An entity's consumers show on the node's /metrics (farm_entity_receivers): links of a session
    /// and Receive calls alike, and a closed receiver leaves the count.
    /// </summary>
    [Fact]
    public async Task AnEntitysOpenReceivers_AreCounted_SessionLinksAndCallsAlike()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var callingClient = new FarmClient(Connection, new FarmClientOptions { ReceiveOverSession = false });
        var options = new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete, PrefetchCount = 5 };
        var receivers = new[] { client.CreateReceiver(queue, options), client.CreateReceiver(queue, options), callingClient.CreateReceiver(queue, options) };
        // A receiver opens its link on its first receive, and keeps it open while it has prefetch credit.
        await Task.WhenAll(receivers.Select(r => r.ReceiveMessageAsync(TimeSpan.FromMilliseconds(200))));
        await Eventually.UntilAsync(async () => await ReceiversAsync(queue) == 3, Patience, "3 receivers of the queue counted");

        await receivers[0].DisposeAsync();
        await receivers[2].DisposeAsync();
        await Eventually.UntilAsync(async () => await ReceiversAsync(queue) == 1, Patience, "the closed receivers to leave the count");
        await receivers[1].DisposeAsync();
        await Eventually.UntilAsync(async () => await ReceiversAsync(queue) == 0, Patience, "no receiver left");
    }

    /// <summary>
    /// The raw session (promise 6 for its input): a link whose first frame is not 'open' and a link
    /// to a missing queue each end with their own failure, while a good link beside them gets its
    /// message; a detached link gets nothing more, and a half-closed session ends.
    /// </summary>
    [Fact]
    public async Task BadLinksEndAlone_AGoodLinkBesideThemIsServed_AndADetachedLinkGetsNothingMore()
    {
        var queue = await CreateQueueAsync();
        await using (var client = new FarmClient(Connection))
        {
            await using var sender = client.CreateSender(queue);
            await sender.SendMessagesAsync([new FarmMessage("first") { MessageId = "first" }, new FarmMessage("second") { MessageId = "second" }]);
        }
        using var channel = Farm.Contracts.FarmChannels.Create(new Uri(fixture.Farm.Address));
        using var call = new Messaging.MessagingClient(channel).ReceiveSession();
        using var deadline = new CancellationTokenSource(Patience);
        var open = (string entity) => new ReceiveRequest { Open = new ReceiveOpen { Entity = entity, Mode = ReceiveMode.ReceiveAndDelete, Credit = 1 } };
        await call.RequestStream.WriteAsync(new ReceiveSessionRequest
        {
            Links =
            {
                new LinkRequest { Link = 1, Request = new ReceiveRequest { Credit = 5 } },
                new LinkRequest { Link = 2, Request = open("session-missing-" + Guid.NewGuid().ToString("N")[..8]) },
                new LinkRequest { Link = 3, Request = open(queue) },
            },
        });

        var frames = new List<LinkResponse>();
        async Task<LinkResponse> NextAsync()
        {
            Assert.True(await call.ResponseStream.MoveNext(deadline.Token));
            frames.AddRange(call.ResponseStream.Current.Links);
            return call.ResponseStream.Current.Links[^1];
        }
        while (frames.Count(f => f.Ended) < 2 || !frames.Any(f => f.Link == 3 && f.Response?.Messages.Count > 0))
        {
            await NextAsync();
        }
        var notOpen = Assert.Single(frames, f => f.Link == 1);
        Assert.True(notOpen.Ended);
        Assert.Equal((int)StatusCode.InvalidArgument, notOpen.Failure.StatusCode);
        var missing = Assert.Single(frames, f => f.Link == 2);
        Assert.True(missing.Ended);
        Assert.Equal(FarmErrorCode.MessagingEntityNotFound, missing.Failure.ErrorCode);
        var delivered = Assert.Single(frames.Where(f => f.Link == 3).SelectMany(f => f.Response.Messages));
        Assert.Equal("first", delivered.Message.MessageId);

        // Detached, the link takes no more: the second message stays in the queue for whoever comes next.
        frames.Clear();
        await call.RequestStream.WriteAsync(new ReceiveSessionRequest { Links = { new LinkRequest { Link = 3, Detach = true } } });
        await call.RequestStream.WriteAsync(new ReceiveSessionRequest { Links = { new LinkRequest { Link = 3, Request = new ReceiveRequest { Credit = 5 } } } });
        await call.RequestStream.CompleteAsync();
        while (await call.ResponseStream.MoveNext(deadline.Token))
        {
            frames.AddRange(call.ResponseStream.Current.Links);
        }
        Assert.DoesNotContain(frames, f => f.Response?.Messages.Count > 0);
        await using var after = new FarmClient(Connection);
        await using var receiver = after.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        Assert.Equal("second", (await receiver.ReceiveMessageAsync(Patience))?.MessageId);
    }

    /// <summary>
    /// A node that predates ReceiveSession (here a gRPC server with only Receive, on a real socket)
    /// answers the session UNIMPLEMENTED: the receivers already waiting move onto Receive calls of
    /// their own, asked for what they asked the session, and later receivers open calls directly.
    /// </summary>
    [Fact]
    public async Task AgainstANodeWithoutSessions_ReceiversFallBackToReceiveCalls()
    {
        await using var app = await InProcessNode.ServeAsync<ReceiveOnlyNode>();
        var node = app.Services.GetRequiredService<ReceiveOnlyNode>();

        await using var client = new FarmClient($"Endpoint={app.Urls.Single()}");
        var receivers = new[] { "a", "b", "c" }.Select(e => client.CreateReceiver(e, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete })).ToList();
        using var deadline = new CancellationTokenSource(Patience);
        var first = await Task.WhenAll(receivers.Select(r => r.ReceiveMessageAsync(Patience, deadline.Token)));
        Assert.Equal(["a", "b", "c"], first.Select(m => m!.Body.ToString()));

        await using var later = client.CreateReceiver("d", new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        Assert.Equal("d", (await later.ReceiveMessageAsync(Patience, deadline.Token))!.Body.ToString());
        Assert.Equal(4, node.Calls);
        foreach (var receiver in receivers)
        {
            await receiver.DisposeAsync();
        }
        await app.StopAsync();
    }

    /// <summary>An older node's Messaging service: Receive calls only, each message's body its entity's name.</summary>
    private sealed class ReceiveOnlyNode : Messaging.MessagingBase
    {
        private int _calls;

        public int Calls => Volatile.Read(ref _calls);

        public override async Task Receive(IAsyncStreamReader<ReceiveRequest> requestStream, IServerStreamWriter<ReceiveResponse> responseStream, ServerCallContext context)
        {
            Interlocked.Increment(ref _calls);
            if (!await requestStream.MoveNext(context.CancellationToken) || requestStream.Current.Open is not { } open)
            {
                throw new RpcException(new Status(StatusCode.InvalidArgument, "open first"));
            }
            var message = new ReceivedMessage
            {
                Message = new Message { MessageId = open.Entity, Body = Google.Protobuf.ByteString.CopyFromUtf8(open.Entity) },
                SequenceNumber = 1,
            };
            await responseStream.WriteAsync(new ReceiveResponse { Messages = { message } }, context.CancellationToken);
            while (await requestStream.MoveNext(context.CancellationToken))
            {
                // Credit and drains: nothing more to give.
            }
        }
    }
}
