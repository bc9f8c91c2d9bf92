using System.Runtime.InteropServices;

namespace Farm.ContainerStore.Containers;

/// <summary>
/// A send a client named (its producer and send id), written in the commit that stored its
/// messages: the entity it went to, the sequence numbers it was answered with (0 for a message
/// dropped by duplicate detection) and when (Unix ms, the broker's clock). A repeat of the send
/// that reaches another broker after a failover finds it and gets the same answer instead of
/// storing the messages again.
/// </summary>
public sealed record SendRecord(string ProducerId, long SendId, long EntityId, long[] SequenceNumbers, long AtMs)
{
    /// <summary>The sequence numbers as stored: 8 bytes each, little-endian.</summary>
    public static byte[] Pack(long[] sequenceNumbers)
    {
        if (!BitConverter.IsLittleEndian)
        {
            throw new PlatformNotSupportedException("Send records are stored little-endian.");
        }
        return MemoryMarshal.AsBytes(sequenceNumbers.AsSpan()).ToArray();
    }

    public static long[] Unpack(byte[] bytes) => MemoryMarshal.Cast<byte, long>(bytes).ToArray();
}
