namespace Farm.Client;

/// <summary>What a shared access policy allows, as Azure Service Bus's AccessRights: Manage always comes with Send and Listen.</summary>
[Flags]
public enum AccessRights
{
    None = 0,
    Listen = 1,
    Send = 2,
    Manage = 4,
}

/// <summary>Which of a shared access policy's two keys.</summary>
public enum SharedAccessKeyType
{
    PrimaryKey,
    SecondaryKey,
}

/// <summary>
/// A shared access policy of the farm: its name is the SharedAccessKeyName of a connection string
/// (Endpoint=sb://...;SharedAccessKeyName=NAME;SharedAccessKey=KEY) and either key signs
/// SharedAccessSignature tokens for the farm's AMQP front door.
/// </summary>
public sealed record SharedAccessPolicyProperties
{
    public string Name { get; init; } = string.Empty;

    public AccessRights Rights { get; init; }

    /// <summary>Base64 of 32 random bytes.</summary>
    public string PrimaryKey { get; init; } = string.Empty;

    /// <summary>Base64 of 32 random bytes.</summary>
    public string SecondaryKey { get; init; } = string.Empty;

    public DateTimeOffset CreatedAt { get; init; }

    /// <summary>When its keys last changed (its creation, or the last renewal).</summary>
    public DateTimeOffset UpdatedAt { get; init; }
}
