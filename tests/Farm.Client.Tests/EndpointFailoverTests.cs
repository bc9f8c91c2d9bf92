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

/// <summary>In redirect mode, which failures of a call straight to an entity's owner send its next calls through a gateway.</summary>
public sealed class RedirectFailoverTests
{
    private static RpcException Farm(string code, string message) =>
        new(new Status(StatusCode.Unavailable, message), new Metadata { { "farm-error", code } });

    public static TheoryData<RpcException, bool> Failures => new()
    {
        // The owner is gone.
        { new RpcException(new Status(StatusCode.Unavailable, "connection refused")), true },
        // A planned move: the owner refuses new work until the next owner serves, which the retries' backoff can outlast.
        { Farm("SERVICE_BUSY", "'q' is moving to another broker; try again."), true },
        { Farm("STALE_EPOCH", "container 1 has a newer owner"), true },
        { Farm("NOT_OWNER", "this broker does not own 'q'"), true },
        // The owner answered, and will again: its database is away for a moment.
        { Farm("STORE_UNAVAILABLE", "the container database is unreachable"), false },
    };

    [Theory]
    [MemberData(nameof(Failures))]
    public async Task AFailureOfTheOwner_SendsTheEntitysNextCallsThroughAGateway_WhenTheOwnerIsGoneOrHandingOver(RpcException failure, bool viaGateway)
    {
        using var connection = new FarmConnection(FarmConnectionString.Parse("Endpoint=http://127.0.0.1:1;EnableRedirect=true"), new FarmClientOptions());
        var direct = new FarmConnection.Route(connection.GetChannel(out _), null, -1, "q");

        connection.ReportFailure(direct, failure);

        if (viaGateway)
        {
            var next = await connection.RouteAsync(isEntityMessaging: true, "q", CancellationToken.None);
            Assert.Null(next.EntityName);
            Assert.True(next.GatewayIndex >= 0);
        }
        else
        {
            // Looked up again at the gateway (nothing listens there: the lookup fails), not sent through it.
            await Assert.ThrowsAnyAsync<Exception>(() => connection.RouteAsync(isEntityMessaging: true, "q", CancellationToken.None).AsTask());
        }
    }
}
