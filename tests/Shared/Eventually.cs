using System.Diagnostics;

namespace Farm.Testing;

/// <summary>
/// The one way the tests wait for something that happens in the background: check a condition
/// until it holds or the deadline passes, then fail naming what was awaited. Never a fixed sleep.
/// (Linked into each test project: tests/Shared.)
/// </summary>
public static class Eventually
{
    private static readonly TimeSpan Poll = TimeSpan.FromMilliseconds(10);

    /// <summary>Waits until <paramref name="condition"/> holds; throws <see cref="TimeoutException"/> naming <paramref name="what"/> past <paramref name="within"/>.</summary>
    public static Task UntilAsync(Func<bool> condition, TimeSpan within, string what) =>
        UntilAsync(() => Task.FromResult(condition()), within, what);

    public static async Task UntilAsync(Func<Task<bool>> condition, TimeSpan within, string what)
    {
        if (!await HoldsWithinAsync(condition, within))
        {
            throw new TimeoutException($"Timed out after {within.TotalSeconds:0.#} s waiting until {what}.");
        }
    }

    /// <summary>Whether <paramref name="condition"/> came to hold within <paramref name="within"/> (for tests that assert it does not).</summary>
    public static Task<bool> HoldsWithinAsync(Func<bool> condition, TimeSpan within) =>
        HoldsWithinAsync(() => Task.FromResult(condition()), within);

    /// <param name="poll">How long between looks: longer for a condition that costs a call to the farm.</param>
    public static async Task<bool> HoldsWithinAsync(Func<Task<bool>> condition, TimeSpan within, TimeSpan? poll = null)
    {
        var waited = Stopwatch.StartNew();
        while (!await condition())
        {
            if (waited.Elapsed > within)
            {
                return false;
            }
            await Task.Delay(poll ?? Poll);
        }
        return true;
    }
}
