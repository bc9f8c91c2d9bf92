using System.Buffers;
using Farm.Contracts.V1;
using Google.Protobuf;
using Grpc.Core;

namespace Farm.Contracts.V1
{
    public sealed partial class ReceivedMessage
    {
        /// <summary>
        /// The delivery's message as the broker stored it: the bytes a <see cref="V1.Message"/> serializes
        /// to, which a node's receive streams write as field 1 (<c>message</c>) in place of a parsed
        /// <see cref="Message"/> (<see cref="StoredDeliveries"/>): the wire is the same, and the node
        /// neither parses a delivery nor serializes it again. Set only by the node, with
        /// <see cref="Message"/> null; never read from the wire, not copied by Clone nor compared by
        /// Equals. <see cref="StoredDeliveries.MessageOf"/> parses it for whoever needs the object.
        /// </summary>
        public byte[]? StoredMessage { get; set; }
    }

    public sealed partial class ReceiveSessionResponse
    {
        /// <summary>
        /// Stored messages this response delivers more than once (<see cref="SharedMessages"/>): written
        /// as <c>shared_messages</c> entries after those of <see cref="SharedMessages"/>, so a delivery
        /// naming one has a position past them. Node-side only, like <see cref="ReceivedMessage.StoredMessage"/>.
        /// </summary>
        public List<byte[]> SharedStoredMessages { get; } = [];
    }
}

namespace Farm.Contracts
{
    /// <summary>
    /// The node's receive responses written with each delivery's stored bytes spliced in as its
    /// <c>message</c> field: what a message's payload already is (the send serialized it once), so
    /// the node copies it instead of parsing it into a <see cref="Message"/> and serializing that again,
    /// sizing it at each of the response's nesting levels. The bytes on the wire are exactly those the
    /// generated serializer writes for the parsed message (field 1 first, then the delivery's other
    /// fields). Only the node's receive streams use it (the gRPC response marshallers of Receive and
    /// ReceiveSession); a response holding no stored delivery is written by the generated code.
    /// </summary>
    public static class StoredDeliveries
    {
        private const byte MessageFieldTag = (1 << 3) | 2; // field 1, length-delimited
        private const byte LinkFieldTag = (1 << 3) | 0; // LinkResponse.link: field 1, varint
        private const byte ResponseFieldTag = (2 << 3) | 2; // LinkResponse.response: field 2
        private const byte SharedFieldTag = (2 << 3) | 2; // ReceiveSessionResponse.shared_messages: field 2

        /// <summary>Response marshaller of the Receive call: stored deliveries spliced in.</summary>
        public static readonly Marshaller<ReceiveResponse> ReceiveResponseMarshaller = Marshallers.Create(
            (ReceiveResponse response, SerializationContext context) => Serialize(response, context, SizeOf, Write),
            context => ReceiveResponse.Parser.ParseFrom(context.PayloadAsReadOnlySequence()));

        /// <summary>Response marshaller of the ReceiveSession call: stored deliveries (and stored shared messages) spliced in.</summary>
        public static readonly Marshaller<ReceiveSessionResponse> ReceiveSessionResponseMarshaller = Marshallers.Create(
            (ReceiveSessionResponse response, SerializationContext context) => Serialize(response, context, SizeOf, Write),
            context => ReceiveSessionResponse.Parser.ParseFrom(context.PayloadAsReadOnlySequence()));

        /// <summary>The bytes the Receive call's marshaller writes for <paramref name="response"/> (what a client reads).</summary>
        public static byte[] ToBytes(ReceiveResponse response) => ToBytes(response, SizeOf, Write);

        /// <summary>The bytes the ReceiveSession call's marshaller writes for <paramref name="response"/>.</summary>
        public static byte[] ToBytes(ReceiveSessionResponse response) => ToBytes(response, SizeOf, Write);

        /// <summary>The delivery's message: the parsed one, or its stored bytes parsed now (a fresh object each time).</summary>
        public static Message? MessageOf(ReceivedMessage received) =>
            received.Message ?? (received.StoredMessage is { } stored ? Message.Parser.ParseFrom(stored) : null);

        /// <summary>Serialized size of <paramref name="frame"/>, its stored deliveries counted.</summary>
        public static int SizeOf(LinkResponse frame) => HoldsStored(frame) ? SizeOf(frame, SizeLog.Start()) : frame.CalculateSize();

        /// <summary>Serialized size of <paramref name="response"/>, its stored deliveries counted.</summary>
        public static int SizeOf(ReceiveResponse response) => SizeOf(response, SizeLog.Start());

        /// <summary>Serialized size of <paramref name="response"/>, its stored deliveries and stored shared messages counted.</summary>
        public static int SizeOf(ReceiveSessionResponse response) => SizeOf(response, SizeLog.Start());

        // Each SizeOf logs the sizes of the parts it will prefix with a length, in the order the
        // matching Write reads them back: every size is worked out once (the generated code works a
        // nested message's size out again at each level that encloses it).

        private static int SizeOf(ReceiveResponse response, SizeLog sizes)
        {
            if (!HoldsStored(response))
            {
                return response.CalculateSize();
            }
            var size = 0;
            foreach (var received in response.Messages)
            {
                size += Field(sizes.Add(received.CalculateSize() + StoredFieldSize(received)));
            }
            return size;
        }

        private static int SizeOf(LinkResponse frame, SizeLog sizes)
        {
            var slot = sizes.Reserve();
            return LinkFieldSize(frame) + Field(sizes.Set(slot, SizeOf(frame.Response, sizes)));
        }

        private static int SizeOf(ReceiveSessionResponse response, SizeLog sizes)
        {
            if (!HoldsStored(response))
            {
                return response.CalculateSize();
            }
            var size = 0;
            foreach (var frame in response.Links)
            {
                var slot = sizes.Reserve();
                size += Field(sizes.Set(slot, HoldsStored(frame) ? SizeOf(frame, sizes) : frame.CalculateSize()));
            }
            foreach (var shared in response.SharedMessages)
            {
                size += Field(sizes.Add(shared.CalculateSize()));
            }
            foreach (var stored in response.SharedStoredMessages)
            {
                size += Field(stored.Length);
            }
            return size;
        }

        private static void Write(ReceiveResponse response, SizeLog sizes, IBufferWriter<byte> output)
        {
            if (!HoldsStored(response))
            {
                response.WriteTo(output);
                return;
            }
            foreach (var received in response.Messages)
            {
                WriteTagAndLength(output, MessageFieldTag, sizes.Next());
                if (StoredField(received) is { } stored)
                {
                    WriteTagAndLength(output, MessageFieldTag, stored.Length);
                    output.Write(stored);
                }
                // Message is null: the generated code writes the delivery's other fields, in their order.
                received.WriteTo(output);
            }
        }

        private static void Write(LinkResponse frame, SizeLog sizes, IBufferWriter<byte> output)
        {
            var responseSize = sizes.Next();
            if (frame.Link != 0)
            {
                WriteVarint(output, LinkFieldTag);
                WriteVarint(output, (ulong)frame.Link);
            }
            WriteTagAndLength(output, ResponseFieldTag, responseSize);
            Write(frame.Response, sizes, output);
        }

        private static void Write(ReceiveSessionResponse response, SizeLog sizes, IBufferWriter<byte> output)
        {
            if (!HoldsStored(response))
            {
                response.WriteTo(output);
                return;
            }
            foreach (var frame in response.Links)
            {
                WriteTagAndLength(output, MessageFieldTag, sizes.Next());
                if (HoldsStored(frame))
                {
                    Write(frame, sizes, output);
                }
                else
                {
                    frame.WriteTo(output);
                }
            }
            foreach (var shared in response.SharedMessages)
            {
                WriteTagAndLength(output, SharedFieldTag, sizes.Next());
                shared.WriteTo(output);
            }
            foreach (var stored in response.SharedStoredMessages)
            {
                WriteTagAndLength(output, SharedFieldTag, stored.Length);
                output.Write(stored);
            }
        }

        private static void Serialize<T>(T response, SerializationContext context, Func<T, SizeLog, int> sizeOf, Action<T, SizeLog, IBufferWriter<byte>> write)
        {
            var sizes = SizeLog.Start();
            context.SetPayloadLength(sizeOf(response, sizes));
            write(response, sizes, context.GetBufferWriter());
            context.Complete();
        }

        private static byte[] ToBytes<T>(T response, Func<T, SizeLog, int> sizeOf, Action<T, SizeLog, IBufferWriter<byte>> write)
        {
            var sizes = SizeLog.Start();
            var size = sizeOf(response, sizes);
            var output = new ArrayBufferWriter<byte>(Math.Max(size, 1));
            write(response, sizes, output);
            if (output.WrittenCount != size)
            {
                throw new InvalidOperationException($"Wrote {output.WrittenCount} bytes of a response sized {size}.");
            }
            return output.WrittenSpan.ToArray();
        }

        /// <summary>
        /// The sizes one response's SizeOf logged, read back by its Write. One per thread, reused: a
        /// response is sized and written on one thread with nothing in between.
        /// </summary>
        private sealed class SizeLog
        {
            [ThreadStatic]
            private static SizeLog? _current;
            private int[] _sizes = new int[64];
            private int _count;
            private int _read;

            public static SizeLog Start()
            {
                var log = _current ??= new SizeLog();
                log._count = 0;
                log._read = 0;
                return log;
            }

            public int Reserve()
            {
                if (_count == _sizes.Length)
                {
                    Array.Resize(ref _sizes, _sizes.Length * 2);
                }
                return _count++;
            }

            public int Set(int slot, int size) => _sizes[slot] = size;

            public int Add(int size) => Set(Reserve(), size);

            public int Next() => _sizes[_read++];
        }

        /// <summary>The stored bytes written as field 1: only for a delivery with no parsed message that does not name a shared one.</summary>
        private static byte[]? StoredField(ReceivedMessage received) =>
            received is { Message: null, SharedMessage: 0, StoredMessage: { } stored } ? stored : null;

        private static int StoredFieldSize(ReceivedMessage received) => StoredField(received) is { } stored ? Field(stored.Length) : 0;

        private static int LinkFieldSize(LinkResponse frame) => frame.Link != 0 ? 1 + CodedOutputStream.ComputeInt64Size(frame.Link) : 0;

        /// <summary>A length-delimited field of one-byte tag holding <paramref name="length"/> bytes.</summary>
        private static int Field(int length) => 1 + CodedOutputStream.ComputeLengthSize(length) + length;

        /// <summary>
        /// Whether the response is written here: it holds a delivery with stored bytes. It is written
        /// field by field, so it must hold nothing but deliveries (the node sends credit answers,
        /// drains and settlements in responses of their own); one that holds more has its stored
        /// deliveries parsed here and is written by the generated code.
        /// </summary>
        private static bool HoldsStored(ReceiveResponse response)
        {
            var stored = false;
            foreach (var received in response.Messages)
            {
                stored |= received.StoredMessage is not null;
            }
            if (stored && (response.Drained || response.Settled is not null || response.SettlesOnStream || response.SettleCredit))
            {
                ParseStored(response);
                return false;
            }
            return stored;
        }

        private static void ParseStored(ReceiveResponse response)
        {
            foreach (var received in response.Messages)
            {
                // One that names a shared message carries no message field: the response's
                // shared_messages has it, and SharedMessages.Restore gives it back by its stored bytes.
                if (received is { StoredMessage: not null, SharedMessage: 0 })
                {
                    received.Message ??= MessageOf(received);
                    received.StoredMessage = null;
                }
            }
        }

        private static bool HoldsStored(LinkResponse frame)
        {
            if (frame.Response is not { } response || !HoldsStored(response))
            {
                return false;
            }
            if (frame.Ended || frame.Failure is not null)
            {
                // Never sent by the node (an ending frame carries no deliveries): written whole by the generated code.
                ParseStored(response);
                return false;
            }
            return true;
        }

        private static bool HoldsStored(ReceiveSessionResponse response)
        {
            if (response.SharedStoredMessages.Count > 0)
            {
                return true;
            }
            foreach (var frame in response.Links)
            {
                if (HoldsStored(frame))
                {
                    return true;
                }
            }
            return false;
        }

        private static void WriteTagAndLength(IBufferWriter<byte> output, byte tag, int length)
        {
            var span = output.GetSpan(6);
            span[0] = tag;
            var written = 1 + WriteVarint(span[1..], (uint)length);
            output.Advance(written);
        }

        private static void WriteVarint(IBufferWriter<byte> output, ulong value)
        {
            var span = output.GetSpan(10);
            output.Advance(WriteVarint(span, value));
        }

        private static int WriteVarint(Span<byte> span, ulong value)
        {
            var i = 0;
            while (value >= 0x80)
            {
                span[i++] = (byte)(value | 0x80);
                value >>= 7;
            }
            span[i++] = (byte)value;
            return i;
        }
    }
}
