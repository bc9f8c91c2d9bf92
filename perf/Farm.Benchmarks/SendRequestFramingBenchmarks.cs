using System.Buffers.Binary;
using BenchmarkDotNet.Attributes;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Benchmarks;

/// <summary>
/// A SendRequest of N 1 KB messages to and from a gRPC frame (5-byte header + protobuf), the work
/// client and broker do for every send call. Mirrors Farm.Contracts.Rpc.GrpcFraming, which is
/// internal to Farm.Contracts: compute the size, write header and message into one buffer; parse.
/// </summary>
[MemoryDiagnoser]
public class SendRequestFramingBenchmarks
{
    private const int FrameHeaderSize = 5;

    private SendRequest _request = new();
    private byte[] _frame = [];

    [Params(1, 100)]
    public int Messages { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        var body = new byte[1024];
        new Random(42).NextBytes(body);
        _request = new SendRequest { Entity = "orders" };
        for (var i = 0; i < Messages; i++)
        {
            var message = new Message
            {
                Body = ByteString.CopyFrom(body),
                MessageId = i.ToString(System.Globalization.CultureInfo.InvariantCulture),
                ContentType = "application/octet-stream",
            };
            message.ApplicationProperties["perf-sent-at"] = new PropertyValue { LongValue = 638_000_000_000_000 + i };
            _request.Messages.Add(message);
        }

        _frame = Encode();
    }

    [Benchmark]
    public byte[] Encode()
    {
        var size = _request.CalculateSize();
        var frame = new byte[FrameHeaderSize + size];
        frame[0] = 0;
        BinaryPrimitives.WriteUInt32BigEndian(frame.AsSpan(1), (uint)size);
        _request.WriteTo(frame.AsSpan(FrameHeaderSize));
        return frame;
    }

    [Benchmark]
    public SendRequest Decode()
    {
        var length = (int)BinaryPrimitives.ReadUInt32BigEndian(_frame.AsSpan(1));
        return SendRequest.Parser.ParseFrom(_frame.AsSpan(FrameHeaderSize, length));
    }
}
