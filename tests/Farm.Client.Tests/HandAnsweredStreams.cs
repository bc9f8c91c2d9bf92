using System.Threading.Channels;
using Grpc.Core;

namespace Farm.Client.Tests;

/// <summary>One duplex call: the requests the client wrote, the answers the test gives.</summary>
internal sealed class HandAnsweredCall<TRequest, TResponse>
{
    public Channel<TRequest> Requests { get; } = Channel.CreateUnbounded<TRequest>();

    public Channel<TResponse> Answers { get; } = Channel.CreateUnbounded<TResponse>();

    public async Task<TRequest> NextRequestAsync(TimeSpan patience) => await Requests.Reader.ReadAsync().AsTask().WaitAsync(patience);
}

/// <summary>
/// A fake CallInvoker for the SDK's own stream bookkeeping: every duplex call of the request and
/// response types the test names is one whose requests the test reads and whose answers it writes,
/// each call in turn. Other calls are not supported.
/// </summary>
internal sealed class HandAnsweredStreams<TRequest, TResponse>(TimeSpan patience) : CallInvoker
{
    public Channel<HandAnsweredCall<TRequest, TResponse>> Calls { get; } = Channel.CreateUnbounded<HandAnsweredCall<TRequest, TResponse>>();

    public async Task<HandAnsweredCall<TRequest, TResponse>> NextCallAsync() => await Calls.Reader.ReadAsync().AsTask().WaitAsync(patience);

    public override AsyncDuplexStreamingCall<TReq, TResp> AsyncDuplexStreamingCall<TReq, TResp>(Method<TReq, TResp> method, string? host, CallOptions options)
    {
        var call = new HandAnsweredCall<TRequest, TResponse>();
        Calls.Writer.TryWrite(call);
        var writer = new RequestWriter(call.Requests.Writer);
        var reader = new AnswerReader(call.Answers.Reader);
        return new AsyncDuplexStreamingCall<TReq, TResp>(
            (IClientStreamWriter<TReq>)(object)writer, (IAsyncStreamReader<TResp>)(object)reader,
            Task.FromResult(new Metadata()), () => Status.DefaultSuccess, () => [], () => { });
    }

    public override TResp BlockingUnaryCall<TReq, TResp>(Method<TReq, TResp> method, string? host, CallOptions options, TReq request) => throw new NotSupportedException();

    public override AsyncUnaryCall<TResp> AsyncUnaryCall<TReq, TResp>(Method<TReq, TResp> method, string? host, CallOptions options, TReq request) => throw new NotSupportedException();

    public override AsyncServerStreamingCall<TResp> AsyncServerStreamingCall<TReq, TResp>(Method<TReq, TResp> method, string? host, CallOptions options, TReq request) => throw new NotSupportedException();

    public override AsyncClientStreamingCall<TReq, TResp> AsyncClientStreamingCall<TReq, TResp>(Method<TReq, TResp> method, string? host, CallOptions options) => throw new NotSupportedException();

    private sealed class RequestWriter(ChannelWriter<TRequest> requests) : IClientStreamWriter<TRequest>
    {
        public WriteOptions? WriteOptions { get; set; }

        public Task WriteAsync(TRequest message) => requests.WriteAsync(message).AsTask();

        public Task CompleteAsync()
        {
            requests.TryComplete();
            return Task.CompletedTask;
        }
    }

    private sealed class AnswerReader(ChannelReader<TResponse> answers) : IAsyncStreamReader<TResponse>
    {
        public TResponse Current { get; private set; } = default!;

        public async Task<bool> MoveNext(CancellationToken cancellationToken)
        {
            if (!await answers.WaitToReadAsync(cancellationToken))
            {
                return false;
            }
            Current = await answers.ReadAsync(cancellationToken);
            return true;
        }
    }
}
