using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;

namespace Farm.Client.Tests;

public class ErrorMappingTests
{
    private static RpcException Rpc(StatusCode status, string? farmError, string detail = "detail")
        => new(new Status(status, detail), farmError is null ? [] : new Metadata { { FarmMetadata.ErrorTrailer, farmError } });

    [Theory]
    [InlineData("INVALID_ARGUMENT", FarmFailureReason.InvalidArgument)]
    [InlineData("MESSAGING_ENTITY_NOT_FOUND", FarmFailureReason.MessagingEntityNotFound)]
    [InlineData("MESSAGING_ENTITY_ALREADY_EXISTS", FarmFailureReason.MessagingEntityAlreadyExists)]
    [InlineData("MESSAGE_SIZE_EXCEEDED", FarmFailureReason.MessageSizeExceeded)]
    [InlineData("MESSAGE_LOCK_LOST", FarmFailureReason.MessageLockLost)]
    [InlineData("MESSAGE_NOT_FOUND", FarmFailureReason.MessageNotFound)]
    [InlineData("QUOTA_EXCEEDED", FarmFailureReason.QuotaExceeded)]
    [InlineData("NOT_OWNER", FarmFailureReason.NotOwner)]
    [InlineData("STALE_EPOCH", FarmFailureReason.StaleEpoch)]
    [InlineData("SERVICE_BUSY", FarmFailureReason.ServiceBusy)]
    [InlineData("STORE_UNAVAILABLE", FarmFailureReason.StoreUnavailable)]
    [InlineData("NOT_SUPPORTED", FarmFailureReason.NotSupported)]
    [InlineData("CONTAINER_NOT_FOUND", FarmFailureReason.ContainerNotFound)]
    [InlineData("SOMETHING_NEW", FarmFailureReason.GeneralError)]
    public void Trailer_DecidesTheReason(string farmError, FarmFailureReason expected)
        => Assert.Equal(expected, FarmErrors.FromRpc(Rpc(StatusCode.FailedPrecondition, farmError), "q").Reason);

    [Fact]
    public void EveryWireErrorCode_HasAMapping_AsATrailerAndAsAnItemCode()
    {
        foreach (var code in Enum.GetValues<FarmErrorCode>())
        {
            var field = typeof(FarmErrorCode).GetField(code.ToString())!;
            var name = field.GetCustomAttributes(typeof(Google.Protobuf.Reflection.OriginalNameAttribute), false)
                .Cast<Google.Protobuf.Reflection.OriginalNameAttribute>().Single().Name;
            // The trailer carries the name without the enum's prefix.
            var trailer = name["FARM_ERROR_CODE_".Length..];
            if (code == FarmErrorCode.Unspecified)
            {
                Assert.Null(FarmErrors.FromCode(code));
                continue;
            }
            Assert.NotEqual(FarmFailureReason.GeneralError, FarmErrors.FromName(trailer));
            Assert.Equal(FarmErrors.FromName(trailer), FarmErrors.FromCode(code));
        }
    }

    [Theory]
    [InlineData(StatusCode.Unavailable, FarmFailureReason.ServiceCommunicationProblem)]
    [InlineData(StatusCode.DeadlineExceeded, FarmFailureReason.ServiceTimeout)]
    [InlineData(StatusCode.NotFound, FarmFailureReason.MessagingEntityNotFound)]
    [InlineData(StatusCode.AlreadyExists, FarmFailureReason.MessagingEntityAlreadyExists)]
    [InlineData(StatusCode.InvalidArgument, FarmFailureReason.InvalidArgument)]
    [InlineData(StatusCode.ResourceExhausted, FarmFailureReason.QuotaExceeded)]
    [InlineData(StatusCode.Internal, FarmFailureReason.GeneralError)]
    public void WithoutTrailer_StatusDecidesTheReason(StatusCode status, FarmFailureReason expected)
        => Assert.Equal(expected, FarmErrors.FromRpc(Rpc(status, null), null).Reason);

    [Fact]
    public void Exception_IsOneReadableLineWithTheServersDetailAndEntity()
    {
        var error = FarmErrors.FromRpc(Rpc(StatusCode.NotFound, "MESSAGING_ENTITY_NOT_FOUND", "Queue 'orders' does not exist\nat line 2"), "orders");

        Assert.Equal("Queue 'orders' does not exist at line 2 (MessagingEntityNotFound, entity 'orders')", error.Message);
        Assert.Equal("orders", error.EntityPath);
        Assert.IsType<RpcException>(error.InnerException);
        Assert.False(error.IsTransient);
    }

    [Fact]
    public void SettleResult_FailedItem_ThrowsWithTheMappedReason()
    {
        var response = new SettleResponse
        {
            Results =
            {
                new SettleResult { LockToken = "a", ErrorCode = FarmErrorCode.Unspecified },
                new SettleResult { LockToken = "b", ErrorCode = FarmErrorCode.MessageLockLost, ErrorMessage = "The lock expired" },
            },
        };

        var error = Assert.Throws<FarmException>(() => FarmReceiver.ThrowIfFailed(response, "q"));

        Assert.Equal(FarmFailureReason.MessageLockLost, error.Reason);
        Assert.Contains("The lock expired", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void SettleResult_AllSucceeded_DoesNotThrow()
        => FarmReceiver.ThrowIfFailed(new SettleResponse { Results = { new SettleResult { LockToken = "a", ErrorCode = FarmErrorCode.Unspecified }, new SettleResult { LockToken = "b" } } }, "q");
}
