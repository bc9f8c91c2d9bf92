using Farm.Gateway.Amqp.Management;
using Farm.Gateway.Amqp.Security;

namespace Farm.Gateway.Amqp;

internal static class AmqpHosting
{
    /// <summary>The AMQP 1.0 listener and what it serves ($cbs, $management, entity links), started with the host.</summary>
    public static IServiceCollection AddAmqpFrontDoor(this IServiceCollection services, AmqpOptions options)
    {
        services.AddSingleton(options);
        services.AddSingleton<FarmCalls>();
        services.AddSingleton<ISharedAccessPolicies, FarmSharedAccessPolicies>();
        services.AddSingleton<CbsNode>();
        services.AddSingleton<ManagementNode>();
        services.AddSingleton<AmqpFrontDoor>();
        services.AddHostedService(s => s.GetRequiredService<AmqpFrontDoor>());
        return services;
    }
}
