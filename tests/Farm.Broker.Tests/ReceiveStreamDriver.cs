using System.Threading.Channels;
using Farm.Broker.Messaging;
using Farm.Contracts;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>A receive stream (MessagingService.ReceiveAsync) driven by hand: requests in, responses out, the call's task.</summary>
internal sealed class ReceiveStreamDriver : IResponseStream<ReceiveResponse>, IAsyncDisposable
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);
    private readonly Channel<ReceiveRequest> _requests = Channel.CreateUnbounded<ReceiveRequest>();
    private readonly Channel<ReceiveResponse> _responses = Channel.CreateUnbounded<ReceiveResponse>();
    private readonly CancellationTokenSource _call = new();
    private Task _running = Task.CompletedTask;

    public static ReceiveStreamDriver Open(MessagingService service, ReceiveOpen open)
    {
        var stream = new ReceiveStreamDriver();
        stream.Send(new ReceiveRequest { Open = open });
        stream._running = service.ReceiveAsync(stream._requests.Reader.ReadAllAsync(), stream, stream._call.Token);
        return stream;
    }

    public void Send(ReceiveRequest request) => _requests.Writer.TryWrite(request);

    /// <summary>The call: ends when the broker ends the stream.</summary>
    public Task Running => _running;

    /// <summary>Each response as a client reads it: written as the node's Receive marshaller writes it (stored deliveries spliced in), then parsed.</summary>
    public Task WriteAsync(ReceiveResponse message, CancellationToken cancellationToken) =>
        _responses.Writer.WriteAsync(ReceiveResponse.Parser.ParseFrom(StoredDeliveries.ToBytes(message)), cancellationToken).AsTask();

    public async Task<ReceiveResponse> NextAsync()
    {
        using var deadline = new CancellationTokenSource(Patience);
        return await _responses.Reader.ReadAsync(deadline.Token);
    }

    /// <summary>Whatever responses arrive until <paramref name="quiet"/> passes without one.</summary>
    public async Task<List<ReceiveResponse>> DrainAsync(TimeSpan quiet)
    {
        var seen = new List<ReceiveResponse>();
        while (true)
        {
            using var wait = new CancellationTokenSource(quiet);
            try
            {
                seen.Add(await _responses.Reader.ReadAsync(wait.Token));
            }
            catch (OperationCanceledException)
            {
                return seen;
            }
        }
    }

    /// <summary>The client cancels the call (its stream is gone).</summary>
    public Task CancelAsync() => _call.CancelAsync();

    public async ValueTask DisposeAsync()
    {
        _requests.Writer.TryComplete();
        await _call.CancelAsync();
        // Bounded: a stream that never ends (its test's own assertions said so) does not hang the run.
        await _running.ContinueWith(_ => { }).WaitAsync(Patience).ContinueWith(_ => { });
        _call.Dispose();
    }
}
