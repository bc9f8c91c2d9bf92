using System.Runtime.CompilerServices;

namespace Farm.Client;

/// <summary>
/// The properties of a settings object assigned since it was built or loaded from the farm: a
/// create or update sends only those, so the others take the farm's defaults (create) or keep
/// their current values (update). Shared by the queue, topic and subscription settings.
/// </summary>
internal sealed class AssignedProperties
{
    private readonly HashSet<string> _names = new(StringComparer.Ordinal);

    public int Count => _names.Count;

    public void Set<T>(ref T field, T value, [CallerMemberName] string property = "")
    {
        field = value;
        _names.Add(property);
    }

    public bool Contains(string property) => _names.Contains(property);

    public void Clear() => _names.Clear();

    public void CopyFrom(AssignedProperties other) => _names.UnionWith(other._names);

    public static TimeSpan Positive(TimeSpan value, [CallerMemberName] string property = "")
        => value > TimeSpan.Zero ? value : throw new ArgumentOutOfRangeException(property, value, $"{property} must be positive.");

    public static T AtLeastOne<T>(T value, [CallerMemberName] string property = "")
        where T : struct, System.Numerics.INumber<T>
        => value >= T.One ? value : throw new ArgumentOutOfRangeException(property, value, $"{property} must be at least 1.");
}
