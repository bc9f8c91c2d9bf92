using Farm.Client;
using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;

namespace Farm.Perf.Load;

/// <summary>
/// <c>--complete batch</c>: completes a whole received batch with one Settle call on the wire,
/// which the protocol allows (SettleRequest carries many lock tokens) but the SDK does not offer
/// (FarmReceiver completes one message per call). It bypasses the SDK on purpose, to show what
/// batched settlement in the client would be worth; the default (<c>--complete sdk</c>) is the
/// figure to quote.
/// </summary>
internal sealed class BatchSettler(string connectionString, string entity) : IDisposable
{
    private static readonly TimeSpan CallTimeout = TimeSpan.FromSeconds(30);

    private readonly Grpc.Net.Client.GrpcChannel _channel = FarmChannels.Create(FarmConnectionString.Parse(connectionString).Endpoints[0]);

    /// <summary>Completes every message; throws <see cref="InvalidOperationException"/> naming the first that failed.</summary>
    public async Task CompleteAsync(IReadOnlyList<FarmReceivedMessage> messages)
    {
        var request = new SettleRequest { Entity = entity };
        foreach (var message in messages)
        {
            request.Settlements.Add(new Settlement { LockToken = message.LockToken, Disposition = Disposition.Complete });
        }

        SettleResponse response;
        try
        {
            response = await new Messaging.MessagingClient(_channel).SettleAsync(request, deadline: DateTime.UtcNow + CallTimeout).ResponseAsync.ConfigureAwait(false);
        }
        catch (RpcException e)
        {
            throw new InvalidOperationException($"the batched Settle call failed: {e.Message}", e);
        }

        foreach (var result in response.Results)
        {
            if (result.ErrorCode != Farm.Contracts.V1.FarmErrorCode.Unspecified)
            {
                throw new InvalidOperationException($"completing lock {result.LockToken} failed: {result.ErrorCode} {result.ErrorMessage}");
            }
        }
    }

    public void Dispose() => _channel.Dispose();
}
