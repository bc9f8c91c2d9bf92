using Farm.Client;

namespace Farm.Cli.Hosting;

/// <summary>Asks a node whether the farm serves: one GetFarmStatus call through the SDK, no retries.</summary>
public static class FarmProbe
{
    public static async Task<bool> IsServingAsync(string address, TimeSpan timeout, CancellationToken cancellationToken)
    {
        var options = new FarmClientOptions
        {
            RetryOptions = new FarmRetryOptions { MaxRetries = 0, TryTimeout = timeout },
        };
        using var admin = new FarmAdministrationClient(new FarmConnectionString([new Uri(address)]), options);
        try
        {
            await admin.GetFarmStatusAsync(cancellationToken);
            return true;
        }
        catch (FarmException ex) when (ex.IsTransient || ex.Reason == FarmFailureReason.GeneralError)
        {
            // Not serving yet: refused, timed out, or still loading its containers.
            return false;
        }
    }
}
