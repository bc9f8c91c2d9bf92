using System.Buffers.Binary;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using Google.Protobuf;

namespace Farm.EndToEnd.Tests;

/// <summary>How a gRPC call made from inside a namespace ended: a response, or a status and the farm-error trailer.</summary>
internal sealed record RpcOutcome<T>(T? Response, int Status, string? FarmError, string Message)
    where T : class
{
    public bool Succeeded => Status == 0 && Response is not null;

    public override string ToString() => Succeeded ? "OK" : $"status {Status} {FarmError ?? "(no farm-error)"}: {Message}";
}

/// <summary>
/// A unary gRPC call to a node from a client standing inside a namespace (next to a cut-off node),
/// written out by hand (HTTP/2 prior knowledge, length-prefixed protobuf, status in the trailers)
/// because the SDK's channel always connects from the host.
/// </summary>
internal static class NamespaceRpc
{
    public static async Task<RpcOutcome<TResponse>> UnaryAsync<TResponse>(
        NetworkNamespaces network, int fromNode, string endpoint, string method, IMessage request, MessageParser<TResponse> parser,
        IReadOnlyDictionary<string, string> headers, TimeSpan timeout)
        where TResponse : class, IMessage<TResponse>
    {
        using var handler = new SocketsHttpHandler
        {
            UseProxy = false,
            ConnectCallback = async (context, cancellationToken) =>
            {
                var target = new IPEndPoint(IPAddress.Parse(context.DnsEndPoint.Host), context.DnsEndPoint.Port);
                return new NetworkStream(await network.ConnectInsideAsync(fromNode, target, cancellationToken), ownsSocket: true);
            },
        };
        using var invoker = new HttpMessageInvoker(handler);
        var payload = request.ToByteArray();
        var body = new byte[5 + payload.Length];
        BinaryPrimitives.WriteUInt32BigEndian(body.AsSpan(1), (uint)payload.Length);
        payload.CopyTo(body, 5);
        using var message = new HttpRequestMessage(HttpMethod.Post, endpoint.TrimEnd('/') + method)
        {
            Version = HttpVersion.Version20,
            VersionPolicy = HttpVersionPolicy.RequestVersionExact,
            Content = new ByteArrayContent(body),
        };
        message.Content.Headers.ContentType = new MediaTypeHeaderValue("application/grpc");
        message.Headers.TryAddWithoutValidation("te", "trailers");
        message.Headers.TryAddWithoutValidation("grpc-timeout", $"{(long)timeout.TotalMilliseconds}m");
        foreach (var (name, value) in headers)
        {
            message.Headers.TryAddWithoutValidation(name, value);
        }

        // A little longer than the server's deadline, so the server's answer wins when it gives one.
        using var deadline = new CancellationTokenSource(timeout + TimeSpan.FromSeconds(5));
        try
        {
            using var response = await invoker.SendAsync(message, deadline.Token);
            var bytes = await response.Content.ReadAsByteArrayAsync(deadline.Token);
            // Errors may come trailers-only: the status is then among the headers.
            string? Find(string name) =>
                response.TrailingHeaders.TryGetValues(name, out var trailer) ? trailer.First()
                : response.Headers.TryGetValues(name, out var header) ? header.First() : null;
            var status = int.TryParse(Find("grpc-status"), out var s) ? s : (int)HttpStatusToGrpc(response.StatusCode);
            var text = Uri.UnescapeDataString(Find("grpc-message") ?? "");
            var result = status == 0 && bytes.Length >= 5 ? parser.ParseFrom(bytes.AsSpan(5).ToArray()) : null;
            return new RpcOutcome<TResponse>(result, status, Find("farm-error"), text);
        }
        catch (OperationCanceledException) when (deadline.IsCancellationRequested)
        {
            return new RpcOutcome<TResponse>(null, 4, null, $"no answer within {timeout} (client deadline)");
        }
        catch (HttpRequestException e)
        {
            return new RpcOutcome<TResponse>(null, 14, null, $"transport: {e.Message}");
        }
    }

    private static int HttpStatusToGrpc(HttpStatusCode status) => status == HttpStatusCode.OK ? 2 : 14;
}
