using System.Buffers.Binary;
using System.Globalization;
using System.Text;

namespace Farm.Contracts.Rpc;

/// <summary>
/// The parts of the gRPC-over-HTTP/2 protocol that client (<see cref="RpcChannel"/>) and server
/// (Farm.Broker.Rpc) share: message frame headers, status headers, grpc-timeout and grpc-message
/// encoding. See https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md.
/// </summary>
internal static class GrpcProtocol
{
    public const string ContentType = "application/grpc";
    public const string StatusHeader = "grpc-status";
    public const string MessageHeader = "grpc-message";
    public const string TimeoutHeader = "grpc-timeout";

    /// <summary>Each message is prefixed by a compressed flag (1 byte) and its length (4 bytes, big-endian).</summary>
    public const int FrameHeaderSize = 5;

    public static void WriteFrameHeader(Span<byte> destination, int messageLength)
    {
        destination[0] = 0; // Farm never compresses messages.
        BinaryPrimitives.WriteUInt32BigEndian(destination[1..], (uint)messageLength);
    }

    /// <summary>Reads a frame header, failing the call on anything Farm cannot accept.</summary>
    public static int ReadFrameHeader(ReadOnlySpan<byte> header, int maxMessageSize)
    {
        if (header[0] != 0)
        {
            // We never send grpc-accept-encoding, so a peer that compresses anyway is broken.
            throw new RpcException(RpcStatusCode.Internal,
                header[0] == 1 ? "Received a compressed message, but no compression was negotiated." : $"Invalid message frame flag {header[0]}.");
        }

        var length = BinaryPrimitives.ReadUInt32BigEndian(header[1..]);
        if (length > (uint)maxMessageSize)
        {
            throw new RpcException(RpcStatusCode.ResourceExhausted,
                $"Received message of {length} bytes exceeds the maximum message size of {maxMessageSize} bytes.");
        }

        return (int)length;
    }

    public static bool IsGrpcContentType(string? contentType) =>
        contentType is not null
        && contentType.StartsWith(ContentType, StringComparison.OrdinalIgnoreCase)
        && (contentType.Length == ContentType.Length || contentType[ContentType.Length] is '+' or ';');

    /// <summary>grpc-timeout: at most 8 digits and a unit. Milliseconds unless that needs more digits.</summary>
    public static string FormatTimeout(TimeSpan timeout)
    {
        var milliseconds = Math.Max(1, (long)Math.Ceiling(timeout.TotalMilliseconds));
        if (milliseconds <= 99_999_999)
        {
            return milliseconds.ToString(CultureInfo.InvariantCulture) + "m";
        }

        var seconds = Math.Min(99_999_999, (long)Math.Ceiling(timeout.TotalSeconds));
        return seconds.ToString(CultureInfo.InvariantCulture) + "S";
    }

    public static bool TryParseTimeout(string? value, out TimeSpan timeout)
    {
        timeout = default;
        if (value is null || value.Length < 2 || value.Length > 9
            || !long.TryParse(value.AsSpan(0, value.Length - 1), NumberStyles.None, CultureInfo.InvariantCulture, out var amount))
        {
            return false;
        }

        switch (value[^1])
        {
            case 'H': timeout = TimeSpan.FromHours(amount); return true;
            case 'M': timeout = TimeSpan.FromMinutes(amount); return true;
            case 'S': timeout = TimeSpan.FromSeconds(amount); return true;
            case 'm': timeout = TimeSpan.FromMilliseconds(amount); return true;
            case 'u': timeout = TimeSpan.FromMicroseconds(amount); return true;
            case 'n': timeout = TimeSpan.FromTicks(amount / 100); return true;
            default: return false;
        }
    }

    /// <summary>
    /// grpc-message is percent-encoded UTF-8: bytes outside printable ASCII, and '%' itself,
    /// become %XX so any text survives as an HTTP/2 header value.
    /// </summary>
    public static string EncodeMessage(string message)
    {
        if (!message.AsSpan().ContainsAnyExceptInRange(' ', '~') && !message.Contains('%'))
        {
            return message;
        }

        var builder = new StringBuilder(message.Length * 2);
        foreach (var b in Encoding.UTF8.GetBytes(message))
        {
            if (b is >= 0x20 and <= 0x7E and not (byte)'%')
            {
                builder.Append((char)b);
            }
            else
            {
                builder.Append('%').Append(b.ToString("X2", CultureInfo.InvariantCulture));
            }
        }

        return builder.ToString();
    }

    /// <summary>Decodes %XX sequences; anything malformed is kept as it came, as the spec asks.</summary>
    public static string DecodeMessage(string value) =>
        value.Contains('%') ? Uri.UnescapeDataString(value) : value;

    public static RpcStatusCode ParseStatus(string value) =>
        int.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out var code) ? (RpcStatusCode)code : RpcStatusCode.Unknown;

    public static string FormatStatus(RpcStatusCode code) => ((int)code).ToString(CultureInfo.InvariantCulture);

    /// <summary>The status a client reports for an HTTP response that is not a gRPC response (gRPC's http-grpc-status-mapping).</summary>
    public static RpcStatusCode StatusFromHttp(int httpStatus) => httpStatus switch
    {
        400 => RpcStatusCode.Internal,
        401 => RpcStatusCode.Unauthenticated,
        403 => RpcStatusCode.PermissionDenied,
        404 => RpcStatusCode.Unimplemented,
        429 or 502 or 503 or 504 => RpcStatusCode.Unavailable,
        _ => RpcStatusCode.Unknown,
    };
}
