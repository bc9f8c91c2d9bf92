using Farm.Contracts.V1;

namespace Farm.Contracts;

/// <summary>
/// A message delivered to several links of one receive session in the same response (a topic's
/// message to the subscriptions a client receives from) goes on the wire once: the response's
/// <c>shared_messages</c> carries it, and each delivery names it by position. Without this a
/// 1,000-subscription fan-out sent each 1 KB body once per subscription, and both sides spent most
/// of their bytes copying, framing and parsing the same body again. The node shares only what is
/// the same object (its receive streams deliver each subscription the topic's one stored payload,
/// <see cref="ReceivedMessage.StoredMessage"/>; a proxied link, the one parse of it), so nothing is
/// compared but references.
/// </summary>
public static class SharedMessages
{
    /// <summary>
    /// Moves every message <paramref name="response"/> delivers more than once into its shared list,
    /// each delivery naming it. Returns what <see cref="Restore"/> needs to put the deliveries back as
    /// they were once the response is written (their owners may read them after), or null when
    /// nothing was shared.
    /// </summary>
    public static List<ReceivedMessage>? Share(ReceiveSessionResponse response)
    {
        // One link's response never holds a message twice: sharing needs two links with deliveries.
        var linksWithDeliveries = 0;
        foreach (var link in response.Links)
        {
            if (link.Response is { Messages.Count: > 0 } && ++linksWithDeliveries == 2)
            {
                break;
            }
        }
        if (linksWithDeliveries < 2)
        {
            return null;
        }

        // A delivery's message is the parsed object, or the stored bytes the node splices in
        // (StoredDeliveries): either is shared by reference.
        var counts = new Dictionary<object, int>(ReferenceEqualityComparer.Instance);
        var repeated = false;
        foreach (var received in Deliveries(response))
        {
            if (IdentityOf(received) is { } message)
            {
                var count = counts.GetValueOrDefault(message) + 1;
                counts[message] = count;
                repeated |= count == 2;
            }
        }
        if (!repeated)
        {
            return null;
        }

        var positions = new Dictionary<object, int>(ReferenceEqualityComparer.Instance);
        var shared = new List<ReceivedMessage>();
        foreach (var received in Deliveries(response))
        {
            if (received.Message is not { } message || counts.GetValueOrDefault(message) < 2)
            {
                continue;
            }
            if (!positions.TryGetValue(message, out var position))
            {
                response.SharedMessages.Add(message);
                position = response.SharedMessages.Count;
                positions[message] = position;
            }
            received.Message = null;
            received.SharedMessage = position;
            shared.Add(received);
        }
        // Stored ones go on the wire after the parsed ones (StoredDeliveries writes them last).
        foreach (var received in Deliveries(response))
        {
            if (received.Message is not null || received.StoredMessage is not { } stored || counts.GetValueOrDefault(stored) < 2)
            {
                continue;
            }
            if (!positions.TryGetValue(stored, out var position))
            {
                response.SharedStoredMessages.Add(stored);
                position = response.SharedMessages.Count + response.SharedStoredMessages.Count;
                positions[stored] = position;
            }
            received.SharedMessage = position;
            shared.Add(received);
        }
        return shared;
    }

    /// <summary>Puts the deliveries <see cref="Share"/> changed back as they were (each with its message or its stored bytes).</summary>
    public static void Restore(ReceiveSessionResponse response, List<ReceivedMessage> shared)
    {
        foreach (var received in shared)
        {
            if (received.StoredMessage is null)
            {
                received.Message = response.SharedMessages[received.SharedMessage - 1];
            }
            received.SharedMessage = 0;
        }
        response.SharedMessages.Clear();
        response.SharedStoredMessages.Clear();
    }

    private static object? IdentityOf(ReceivedMessage received) => (object?)received.Message ?? received.StoredMessage;

    /// <summary>
    /// Gives each delivery of <paramref name="response"/> that names a shared message that message
    /// (the same object for all: read-only), and empties the shared list: the response then reads as
    /// one sent without sharing. Throws when a delivery names a position the response lacks.
    /// </summary>
    public static void Resolve(ReceiveSessionResponse response)
    {
        var shared = response.SharedMessages;
        if (shared.Count == 0)
        {
            return;
        }
        foreach (var received in Deliveries(response))
        {
            if (received.SharedMessage == 0)
            {
                continue;
            }
            if (received.SharedMessage < 0 || received.SharedMessage > shared.Count)
            {
                throw new InvalidDataException(
                    $"A delivery names shared message {received.SharedMessage}, but the response carries {shared.Count}.");
            }
            received.Message = shared[received.SharedMessage - 1];
            received.SharedMessage = 0;
        }
        // Read as a response without sharing would be.
        shared.Clear();
    }

    private static IEnumerable<ReceivedMessage> Deliveries(ReceiveSessionResponse response)
    {
        foreach (var link in response.Links)
        {
            if (link.Response is { Messages.Count: > 0 } answer)
            {
                foreach (var received in answer.Messages)
                {
                    yield return received;
                }
            }
        }
    }
}
