using Google.Protobuf;

namespace Farm.Contracts.Rpc;

public sealed partial class RpcChannel
{
    /// <summary>Calls a unary method, e.g. "/farm.v1.Messaging/Send".</summary>
    public async Task<TResponse> UnaryAsync<TRequest, TResponse>(string method, TRequest request, MessageParser<TResponse> responseParser, CallOptions options = default)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        ArgumentNullException.ThrowIfNull(request);
        ArgumentNullException.ThrowIfNull(responseParser);

        using var call = new RpcCall(this, options);
        try
        {
            var content = new GrpcMessageContent(request);
            using var httpRequest = CreateRequest(method, content, call, options);
            using var response = await _invoker.SendAsync(httpRequest, call.Token).ConfigureAwait(false);
            if (GrpcResponse.IsTrailersOnly(response, out var trailersOnlyError))
            {
                throw trailersOnlyError ?? new RpcException(RpcStatusCode.Internal, "The server ended the call without a response message.");
            }

            var body = await response.Content.ReadAsStreamAsync(call.Token).ConfigureAwait(false);
            var message = await GrpcFraming.ReadMessageAsync(body, responseParser, Options.MaxReceiveMessageSize, call.Token).ConfigureAwait(false);
            var extra = message is null ? default : await GrpcFraming.ReadMessageAsync(body, responseParser, Options.MaxReceiveMessageSize, call.Token).ConfigureAwait(false);

            // Trailers arrive only after the body has been read to its end.
            if (GrpcResponse.GetFinalStatus(response) is { } error)
            {
                throw error;
            }

            if (message is null || extra is not null)
            {
                throw new RpcException(RpcStatusCode.Internal, message is null
                    ? "The server ended the call without a response message."
                    : "The server sent more than one response message to a unary call.");
            }

            return message;
        }
        catch (Exception ex) when (ex is not RpcException)
        {
            throw call.Translate(ex);
        }
    }
}
