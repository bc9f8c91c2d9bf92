using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// One parse of a payload that several messages hold (a topic message fanned out unchanged to its
/// subscriptions): the first delivery parses it, every other delivery of it hands out the same
/// <see cref="Message"/>. Shared read-only: it is only serialized (concurrently, which protobuf
/// messages allow), never changed. A thousand subscriptions cost one parse, not a thousand.
/// Lives until each message holding it was handed out (a delivery lets go of it) or left memory;
/// nothing is parsed before the first delivery, so a backlog nobody received from holds no parsed copies.
/// <para>
/// A queue message sent to a receiver already waiting for it starts with the send's own parsed
/// message as <paramref name="parsed"/> (the message the payload was serialized from, which nobody
/// changes once stored): it is handed out within milliseconds, so holding it costs nothing, and its
/// delivery parses nothing. A delivery lets go of the parse (<c>QueueEntity.TryTakeAsync</c>), so a
/// message left locked or abandoned holds only its bytes.
/// </para>
/// </summary>
/// <param name="parsed">Null: parsed at the first delivery.</param>
internal sealed class SharedParse(Message? parsed = null)
{
    private Message? _message = parsed;

    /// <summary>
    /// Starts the parse from the send's own parsed message (the message the payload was serialized
    /// from, which nobody changes once stored) unless it has one: a topic message a waiting receiver
    /// of some subscription will take is handed out within milliseconds, so holding it costs nothing
    /// and that delivery parses nothing, as a queue's does. Safe beside a concurrent <see cref="Get"/>.
    /// </summary>
    public void Offer(Message parsed) => Interlocked.CompareExchange(ref _message, parsed, null);

    /// <summary>The parsed <paramref name="payload"/> (the payload every holder shares); not to be changed.</summary>
    public Message Get(byte[] payload)
    {
        if (Volatile.Read(ref _message) is { } parsed)
        {
            return parsed;
        }
        // Two first deliveries at once may both parse; one copy wins and the other is garbage.
        return Interlocked.CompareExchange(ref _message, PayloadBytes.ToMessage(payload), null) ?? _message!;
    }
}
