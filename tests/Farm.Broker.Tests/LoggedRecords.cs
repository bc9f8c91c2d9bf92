using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;

namespace Farm.Broker.Tests;

/// <summary>What a node logged, one line, for a failing assertion's message.</summary>
internal static class LoggedRecords
{
    public static string Describe(FakeLogger logger, LogLevel atLeast)
    {
        var records = logger.Collector.GetSnapshot().Where(r => r.Level >= atLeast)
            .Select(r => $"{r.Timestamp:HH:mm:ss.fff} {r.Level}: {r.Message}{(r.Exception is { } e ? $" ({e.GetType().Name}: {e.Message})" : "")}")
            .ToList();
        return records.Count == 0 ? $"nothing at {atLeast} or above" : string.Join(" | ", records);
    }
}
