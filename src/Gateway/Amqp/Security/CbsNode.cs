using Farm.Gateway.Amqp.Management;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Framing;

namespace Farm.Gateway.Amqp.Security;

/// <summary>
/// The $cbs node, Azure's claims-based security: a client puts a SharedAccessSignature token for
/// an audience (put-token), and the connection may then use the entities that audience covers with
/// the rights of the token's policy, until the token expires. A token Farm cannot verify (unknown
/// policy, wrong signature, expired, an audience it does not cover) is answered 401 and grants
/// nothing.
/// </summary>
internal sealed partial class CbsNode(ISharedAccessPolicies policies, TimeProvider time, ILogger<CbsNode> logger) : RequestNode(logger)
{
    public const string Address = "$cbs";
    private const string SasTokenType = "servicebus.windows.net:sastoken";

    protected override string StatusCodeProperty => "status-code";

    protected override string StatusDescriptionProperty => "status-description";

    protected override async Task<AmqpMessage> HandleAsync(AmqpConnectionContext connection, string entityPath, AmqpMessage request)
    {
        var properties = request.ApplicationProperties?.Map;
        string? operation = null, type = null, name = null;
        properties?.TryGetValue("operation", out operation);
        properties?.TryGetValue("type", out type);
        properties?.TryGetValue("name", out name);
        if (!string.Equals(operation, "put-token", StringComparison.Ordinal))
        {
            return Answer(400, $"The $cbs node knows only put-token; got '{operation}'.");
        }
        if (!string.Equals(type, SasTokenType, StringComparison.Ordinal))
        {
            return Answer(401, $"Farm accepts SharedAccessSignature tokens ({SasTokenType}); got a token of type '{type}'.");
        }
        var token = (request.BodyType & SectionFlag.AmqpValue) != 0 ? request.ValueBody.Value as string : null;
        if (!SharedAccessSignature.TryParse(token, out var signature, out var error))
        {
            return Deny(name, error);
        }
        var policy = await policies.FindAsync(signature.KeyName, CancellationToken.None).ConfigureAwait(false);
        if (policy is null)
        {
            return Deny(name, $"No shared access policy is named '{signature.KeyName}'.");
        }
        if (!signature.IsSignedWith(policy.PrimaryKey) && !signature.IsSignedWith(policy.SecondaryKey))
        {
            return Deny(name, $"The signature does not match a key of the policy '{policy.Name}'.");
        }
        if (signature.ExpiresAt <= time.GetUtcNow())
        {
            return Deny(name, $"The token expired at {signature.ExpiresAt:u}.");
        }
        var scope = SharedAccessSignature.PathOf(signature.Audience);
        if (name is not null && !SharedAccessSignature.Covers(scope, SharedAccessSignature.PathOf(name)))
        {
            return Deny(name, $"The token is for '{signature.Audience}', which does not cover '{name}'.");
        }
        connection.Claims.Grant(scope, policy.Rights, signature.ExpiresAt);
        LogGranted(logger, scope.Length == 0 ? "(the farm)" : scope, policy.Name, policy.Rights.ToString(), signature.ExpiresAt);
        return Answer(202, "Accepted");
    }

    private AmqpMessage Deny(string? audience, string why)
    {
        LogDenied(logger, audience ?? "(none)", why);
        var answer = Answer(401, why);
        answer.ApplicationProperties.Map["error-condition"] = AmqpErrorCode.UnauthorizedAccess;
        return answer;
    }

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP put-token for {Audience} with policy {Policy}: {Rights} until {ExpiresAt}")]
    private static partial void LogGranted(ILogger logger, string audience, string policy, string rights, DateTimeOffset expiresAt);

    [LoggerMessage(Level = LogLevel.Information, Message = "AMQP put-token for {Audience} refused: {Why}")]
    private static partial void LogDenied(ILogger logger, string audience, string why);
}
