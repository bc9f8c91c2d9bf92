using System.Buffers;
using BenchmarkDotNet.Attributes;
using Farm.Contracts;
using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;

namespace Farm.Benchmarks;

/// <summary>
/// A receive session's response of 50 peek-lock deliveries of 1 KB messages, as the node writes it
/// to the stream: each delivery's stored bytes spliced in (<see cref="StoredDeliveries"/>, what the
/// node does), against the generated code writing parsed messages (what it did before: for a
/// delivery counted at send the send's own message object, otherwise one parsed from its bytes
/// first). Each writes the response once and sizes its frame once first, as the session's frame
/// batcher does.
/// </summary>
[MemoryDiagnoser]
public class DeliveryWritingBenchmarks
{
    private const int Deliveries = 50;
    private readonly ArrayBufferWriter<byte> _output = new(1 << 20);
    private BufferContext _context = null!;
    private byte[] _payload = null!;
    private ReceiveSessionResponse _stored = null!;
    private ReceiveSessionResponse _parsed = null!;

    [GlobalSetup]
    public void Setup()
    {
        _context = new BufferContext(_output);
        var message = new Message
        {
            MessageId = Guid.NewGuid().ToString(),
            Body = ByteString.CopyFrom(new byte[1024]),
            ContentType = "application/octet-stream",
            ApplicationProperties = { ["sent_at"] = new PropertyValue { LongValue = 1_800_000_000_000 } },
        };
        _payload = message.ToByteArray();
        _stored = Response(d => d.StoredMessage = _payload);
        _parsed = Response(d => d.Message = Message.Parser.ParseFrom(_payload));
    }

    private static ReceiveSessionResponse Response(Action<ReceivedMessage> withMessage)
    {
        var response = new ReceiveResponse();
        for (var i = 0; i < Deliveries; i++)
        {
            var delivery = new ReceivedMessage
            {
                SequenceNumber = i + 1,
                EnqueuedTime = Timestamp.FromDateTime(DateTime.UtcNow),
                DeliveryCount = 1,
                LockToken = Guid.NewGuid().ToString(),
                LockedUntil = Timestamp.FromDateTime(DateTime.UtcNow.AddMinutes(1)),
                State = MessageState.Active,
            };
            withMessage(delivery);
            response.Messages.Add(delivery);
        }
        return new ReceiveSessionResponse { Links = { new LinkResponse { Link = 1, Response = response } } };
    }

    [Benchmark(Baseline = true, OperationsPerInvoke = Deliveries)]
    public int GeneratedCode_SendsOwnMessages()
    {
        _output.ResetWrittenCount();
        var frame = _parsed.Links[0].CalculateSize();
        _context.SetPayloadLength(_parsed.CalculateSize());
        _parsed.WriteTo(_output);
        return frame + _output.WrittenCount;
    }

    [Benchmark(OperationsPerInvoke = Deliveries)]
    public int GeneratedCode_ParsedFromStoredBytes()
    {
        foreach (var delivery in _parsed.Links[0].Response.Messages)
        {
            delivery.Message = Message.Parser.ParseFrom(_payload);
        }
        return GeneratedCode_SendsOwnMessages();
    }

    [Benchmark(OperationsPerInvoke = Deliveries)]
    public int StoredBytesSpliced()
    {
        _output.ResetWrittenCount();
        var frame = StoredDeliveries.SizeOf(_stored.Links[0]);
        StoredDeliveries.ReceiveSessionResponseMarshaller.ContextualSerializer(_stored, _context);
        return frame + _output.WrittenCount;
    }

    /// <summary>gRPC's serialization context over a reused buffer (the real one writes into the HTTP/2 stream's pipe).</summary>
    private sealed class BufferContext(ArrayBufferWriter<byte> output) : SerializationContext
    {
        public override void SetPayloadLength(int payloadLength)
        {
        }

        public override IBufferWriter<byte> GetBufferWriter() => output;

        public override void Complete()
        {
        }
    }
}
