using Grpc.Core;

namespace Farm.Client.Tests;

/// <summary>Which failures of a call through a gateway move the client on to the next endpoint of its connection string.</summary>
public sealed class EndpointFailoverTests
{
    public static TheoryData<RpcException, bool> Failures => new()
    {
        { new RpcException(new Status(StatusCode.Unavailable, "connection refused")), true },
        // A frozen node accepts connections and answers nothing: the try runs out of time.
        { new RpcException(new Status(StatusCode.DeadlineExceeded, "deadline")), true },
        { new RpcException(new Status(StatusCode.NotFound, "no such queue"), new Metadata { { "farm-error", "MESSAGING_ENTITY_NOT_FOUND" } }), false },
        { new RpcException(new Status(StatusCode.Internal, "a bug")), false },
    };

    [Theory]
    [MemberData(nameof(Failures))]
    public void AGatewayFailure_MovesToTheNextEndpoint_OnlyWhenTheGatewayDidNotAnswer(RpcException failure, bool moves)
    {
        using var connection = new FarmConnection(FarmConnectionString.Parse("Endpoint=http://127.0.0.1:1,http://127.0.0.1:2,http://127.0.0.1:3"), new FarmClientOptions());
        var route = new FarmConnection.Route(connection.GetChannel(out var index), null, index, null);

        connection.ReportFailure(route, failure);

        Assert.Equal(moves ? 1 : 0, connection.CurrentEndpointIndex);
    }
}
