namespace Farm.ContainerStore.Tests.Contracts;

/// <summary>Waits for a condition that depends on real time (a lease running out), up to a deadline.</summary>
internal static class Eventually
{
    public static async Task<T> ValueAsync<T>(Func<Task<T?>> attempt, TimeSpan deadline, string what)
        where T : class
    {
        var giveUpAt = DateTime.UtcNow + deadline;
        while (true)
        {
            if (await attempt() is { } value)
            {
                return value;
            }

            if (DateTime.UtcNow > giveUpAt)
            {
                throw new TimeoutException($"Gave up after {deadline}: {what}.");
            }

            await Task.Delay(TimeSpan.FromMilliseconds(20));
        }
    }
}
