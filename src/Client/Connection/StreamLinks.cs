using System.Collections.Concurrent;
using Grpc.Core;

namespace Farm.Client;

/// <summary>What the SDK's shared streams (the send stream, the receive session) do alike when one ends.</summary>
internal static class StreamLinks
{
    /// <summary>Removes and returns every entry still waiting on the stream, each exactly once however many callers race.</summary>
    public static List<T> TakeAll<T>(this ConcurrentDictionary<long, T> waiting)
    {
        var taken = new List<T>();
        foreach (var id in waiting.Keys)
        {
            if (waiting.TryRemove(id, out var entry))
            {
                taken.Add(entry);
            }
        }
        return taken;
    }

    /// <summary>The failure of an operation the stream did not answer: the retry policy (or the receiver) tries again.</summary>
    public static RpcException Unavailable(string detail) => new(new Status(StatusCode.Unavailable, detail));
}
