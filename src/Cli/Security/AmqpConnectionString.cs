using Farm.Client;

namespace Farm.Cli.Security;

/// <summary>
/// The connection string an Azure Service Bus SDK takes for a node's AMQP front door:
/// <c>Endpoint=sb://HOST:PORT/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;UseDevelopmentEmulator=true</c>.
/// UseDevelopmentEmulator makes the SDKs speak plain AMQP (no TLS) to the port named, as they do to
/// Microsoft's Service Bus emulator.
/// </summary>
public static class AmqpConnectionString
{
    /// <summary>
    /// The connection string for the node listening at <paramref name="amqpAddress"/>
    /// (amqp://host:port, as the farm database has it), signed with <paramref name="policy"/>'s primary key.
    /// </summary>
    public static string For(string amqpAddress, SharedAccessPolicyProperties policy)
    {
        ArgumentNullException.ThrowIfNull(policy);
        if (!Uri.TryCreate(amqpAddress, UriKind.Absolute, out var uri) || uri.Port <= 0)
        {
            throw new CliException(ExitCodes.Error, $"The farm database names '{amqpAddress}' as an AMQP address; expected amqp://host:port.");
        }
        return $"Endpoint=sb://{uri.Authority}/;SharedAccessKeyName={policy.Name};SharedAccessKey={policy.PrimaryKey};UseDevelopmentEmulator=true";
    }
}
