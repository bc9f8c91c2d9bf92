using System.Text;

namespace Farm.Client;

/// <summary>
/// An immutable message body, shaped like System.BinaryData (System.Memory.Data), which the package
/// registry this project builds against does not serve. Swap for the real type when it does.
/// </summary>
public sealed class BinaryData
{
    private readonly ReadOnlyMemory<byte> _bytes;

    public BinaryData(ReadOnlyMemory<byte> data) => _bytes = data;

    public BinaryData(byte[] data) => _bytes = data ?? throw new ArgumentNullException(nameof(data));

    public BinaryData(string data) => _bytes = Encoding.UTF8.GetBytes(data ?? throw new ArgumentNullException(nameof(data)));

    public static BinaryData Empty { get; } = new(ReadOnlyMemory<byte>.Empty);

    public int Length => _bytes.Length;

    public bool IsEmpty => _bytes.IsEmpty;

    public static BinaryData FromString(string data) => new(data);

    public static BinaryData FromBytes(ReadOnlyMemory<byte> data) => new(data);

    public static BinaryData FromBytes(byte[] data) => new(data);

    public static implicit operator ReadOnlyMemory<byte>(BinaryData? data) => data?._bytes ?? ReadOnlyMemory<byte>.Empty;

    public ReadOnlyMemory<byte> ToMemory() => _bytes;

    public byte[] ToArray() => _bytes.ToArray();

    /// <summary>The bytes decoded as UTF-8.</summary>
    public override string ToString() => Encoding.UTF8.GetString(_bytes.Span);
}
