using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Contracts;

/// <summary>
/// A call's failure carried inside a stream (<see cref="CallFailure"/>, e.g. one send of a send
/// stream) and back: the status code, detail and the "farm-error" and "farm-owner" trailers
/// survive the trip, so the receiving side handles it exactly as if the call itself had failed.
/// </summary>
public static class CallFailureWire
{
    public static CallFailure ToCallFailure(this RpcException error) => new()
    {
        StatusCode = (int)(error.StatusCode == StatusCode.OK ? StatusCode.Unknown : error.StatusCode),
        Detail = error.Status.Detail ?? "",
        ErrorCode = FarmErrorNames.TryParse(error.FarmError(), out var code) ? code : FarmErrorCode.Unspecified,
        OwnerAddress = error.FarmOwner() ?? "",
    };

    public static RpcException ToRpcException(this CallFailure failure)
    {
        var trailers = new Metadata();
        if (failure.ErrorCode != FarmErrorCode.Unspecified)
        {
            trailers.Add(FarmMetadata.ErrorTrailer, FarmErrorNames.Of(failure.ErrorCode));
        }
        if (failure.OwnerAddress.Length > 0)
        {
            trailers.Add(FarmMetadata.OwnerTrailer, failure.OwnerAddress);
        }
        var status = (StatusCode)failure.StatusCode;
        return new RpcException(new Status(status == StatusCode.OK ? StatusCode.Unknown : status, failure.Detail), trailers);
    }
}
