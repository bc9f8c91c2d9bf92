using BenchmarkDotNet.Attributes;
using Farm.Client;
using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Benchmarks;

/// <summary>
/// The client's per-message mapping (Farm.Client's internal MessageMapper): a 1 KB FarmMessage with
/// a message id and one application property to its wire Message on send, and a ReceivedMessage
/// back to a FarmReceivedMessage on receive.
/// </summary>
[MemoryDiagnoser]
public class MessageMappingBenchmarks
{
    private FarmMessage _message = new();
    private ReceivedMessage _received = new();

    [GlobalSetup]
    public void Setup()
    {
        var body = new byte[1024];
        new Random(42).NextBytes(body);
        _message = new FarmMessage(body) { MessageId = "123456", ContentType = "application/octet-stream" };
        _message.ApplicationProperties["perf-sent-at"] = 638_000_000_000_000L;

        var now = Timestamp.FromDateTimeOffset(DateTimeOffset.UnixEpoch.AddYears(55));
        _received = new ReceivedMessage
        {
            Message = MessageMapper.ToProto(_message),
            SequenceNumber = 42,
            EnqueuedTime = now,
            DeliveryCount = 1,
            LockToken = Guid.NewGuid().ToString(),
            LockedUntil = now,
        };
        _received.Message.Body = ByteString.CopyFrom(body);
    }

    [Benchmark]
    public Message ToProto() => MessageMapper.ToProto(_message);

    [Benchmark]
    public int ToProtoAndSize() => MessageMapper.EncodedSizeInRequest(MessageMapper.ToProto(_message));

    [Benchmark]
    public FarmReceivedMessage FromProto() => MessageMapper.FromProto(_received, "orders", settleable: true);
}
