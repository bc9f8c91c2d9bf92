using System.Net.Http;
using Farm.Client;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Testing;
using Grpc.Core;
using Grpc.Net.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A node that proxies a peek-lock receive link to the entity's owner, and whose client goes
/// (detaches the link, cancels it, its connection breaks) while the owner's messages are on their
/// way, gives those messages back to the owner as never delivered: they are available again at
/// once, their delivery not counted. Before, they stayed locked for nobody until their
/// LockDuration ran out (a minute by default) and came again counted. Real node processes; the
/// client is a raw gRPC call that stops reading, so the owner's messages are stuck in the proxy.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ProxiedLinkHandBackTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    /// <summary>Well under the queue's 5-minute lock: only a hand-back frees the messages this soon.</summary>
    private static readonly TimeSpan BackWithin = TimeSpan.FromSeconds(20);

    /// <summary>
    /// The link is one of a ReceiveSession call (what the SDK opens) and the client detaches it.
    /// A reset call or a broken connection takes the same path, but Kestrel reports a reset a
    /// moment after the fact (the stream's cancellation is queued to the thread pool, and writes
    /// in between look finished), so which of the proxy's last writes count as delivered is a
    /// race a test cannot pin down; a detach is seen at once.
    /// </summary>
    [Fact]
    public async Task AProxiedLinkTheClientDetached_GivesTheOwnersMessagesBack_Uncounted()
    {
        const string queue = "handed-back";
        const int count = 10;
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        for (var i = 1; i < 6; i++)
        {
            await admin.CreateContainerAsync();
        }
        var container = await LocalFarm.WaitForContainerOwnedByAsync(admin, node: 2);
        await admin.CreateQueueAsync(new CreateQueueOptions(queue) { ContainerId = container.Id, LockDuration = TimeSpan.FromMinutes(5) });
        await using var client = new FarmClient("Endpoint=" + farm.Endpoints[2]);
        await using var sender = client.CreateSender(queue);
        var peeker = client.CreateReceiver(queue);

        // First a 100 KB message, through node 1, which proxies the link to node 2. The client
        // never reads: its HTTP/2 window (64 KB) cannot take the whole message, so the proxy's
        // write of it to the client stays unfinished.
        await sender.SendMessageAsync(new FarmMessage(new byte[100 * 1024]) { MessageId = "big" });
        using var channel = GrpcChannel.ForAddress(farm.Endpoints[0], new GrpcChannelOptions
        {
            HttpHandler = new SocketsHttpHandler { InitialHttp2StreamWindowSize = 65535 },
        });
        using var cut = new CancellationTokenSource();
        var messaging = new Contracts.V1.Messaging.MessagingClient(channel);
        var open = new ReceiveRequest { Open = new ReceiveOpen { Entity = queue, Mode = ReceiveMode.PeekLock, Credit = count + 1 } };
        using var session = messaging.ReceiveSession(cancellationToken: cut.Token);
        await session.RequestStream.WriteAsync(new ReceiveSessionRequest { Links = { new LinkRequest { Link = 1, Request = open } } });
        await Eventually.UntilAsync(async () => (await peeker.PeekMessagesAsync(1, fromSequenceNumber: 0)) is [{ DeliveryCount: 1 }],
            Patience, "the owner to lock the big message for the proxied link");

        // Then small ones: the owner sends each on, and its writes end (the proxy's connection to it
        // buffers them) while the proxy still waits on the client. Only the proxy holds them now.
        for (var i = 0; i < count; i++)
        {
            await sender.SendMessageAsync(new FarmMessage($"small {i}") { MessageId = $"m{i}" });
        }
        await Eventually.UntilAsync(async () =>
        {
            var peeked = await peeker.PeekMessagesAsync(count + 1, fromSequenceNumber: 0);
            return peeked.Count == count + 1 && peeked.All(m => m.DeliveryCount == 1);
        }, Patience, "the owner to lock every small message for the proxied link");
        await peeker.DisposeAsync();

        // The client is done with the link: it detaches it (the session stays, still unread).
        await session.RequestStream.WriteAsync(new ReceiveSessionRequest { Links = { new LinkRequest { Link = 1, Detach = true } } });

        var next = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var expected = Enumerable.Range(0, count).Select(i => $"m{i}").Append("big").ToList();
        var got = new Dictionary<string, int>();
        using var deadline = new CancellationTokenSource(BackWithin);
        while (expected.Any(id => !got.ContainsKey(id)) && !deadline.IsCancellationRequested)
        {
            try
            {
                foreach (var message in await next.ReceiveMessagesAsync(count + 1, TimeSpan.FromSeconds(1), deadline.Token))
                {
                    Assert.True(got.TryAdd(message.MessageId!, message.DeliveryCount), $"{message.MessageId} came twice");
                }
            }
            catch (OperationCanceledException) when (deadline.IsCancellationRequested)
            {
                break;
            }
        }
        await next.DisposeAsync();
        var missing = expected.Where(id => !got.ContainsKey(id)).ToList();
        Assert.True(missing.Count == 0, $"{missing.Count} of {count + 1} messages the proxy held stayed locked for the link that went: {string.Join(", ", missing)}");
        // Given back as never delivered: the only delivery counted is this one.
        Assert.All(got, pair => Assert.True(pair.Value == 1, $"{pair.Key} came with delivery count {pair.Value}"));
    }
}
