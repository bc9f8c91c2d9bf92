namespace Farm.Broker.Messaging;

/// <summary>The farm.v1.Messaging method names. The gateway maps them (Farm.Gateway.Routing.MessagingRouter).</summary>
public static class MessagingEndpoints
{
    public const string Prefix = "/farm.v1.Messaging/";
}
