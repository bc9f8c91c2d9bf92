namespace Farm.Broker.Telemetry;

/// <summary>
/// Running totals of one entity path on this node ("queue", "queue/$DeadLetterQueue",
/// "topic/Subscriptions/sub", a topic): what the broker durably did with its messages. The hot
/// path adds with one interlocked add; <see cref="NodeMetrics"/> reads the totals as observable
/// counters when a collector asks. A per-message add to an OpenTelemetry counter tagged with the
/// entity cost a tag-set lookup each time (about 4% of a node's CPU with thousands of queues).
/// The totals start at zero when the entity is loaded on this node, as a counter does when its
/// process starts: Prometheus reads the drop as a reset.
/// </summary>
internal sealed class EntityCounters(string path)
{
    private long _sent;
    private long _received;
    private long _countedAtSend;
    private long _countedByMark;
    private long _completed;
    private long _abandoned;
    private long _expired;
    private long _creditGrants;
    private long _receivers;

    public string Path { get; } = path;

    public long Sent => Volatile.Read(ref _sent);

    public long Received => Volatile.Read(ref _received);

    public long CountedAtSend => Volatile.Read(ref _countedAtSend);

    public long CountedByMark => Volatile.Read(ref _countedByMark);

    public long Completed => Volatile.Read(ref _completed);

    public long Abandoned => Volatile.Read(ref _abandoned);

    public long Expired => Volatile.Read(ref _expired);

    public long CreditGrants => Volatile.Read(ref _creditGrants);

    /// <summary>Receive links (Receive calls or links of a session) open on this path here now: its consumers.</summary>
    public long Receivers => Volatile.Read(ref _receivers);

    public void AddSent(int count) => Interlocked.Add(ref _sent, count);

    public void AddReceived(int count) => Interlocked.Add(ref _received, count);

    public void AddCountedAtSend(int count) => Interlocked.Add(ref _countedAtSend, count);

    public void AddCountedByMark(int count) => Interlocked.Add(ref _countedByMark, count);

    public void AddCompleted() => Interlocked.Increment(ref _completed);

    public void AddAbandoned() => Interlocked.Increment(ref _abandoned);

    public void AddExpired() => Interlocked.Increment(ref _expired);

    public void AddCreditGrant() => Interlocked.Increment(ref _creditGrants);

    public void AddReceiver() => Interlocked.Increment(ref _receivers);

    public void RemoveReceiver() => Interlocked.Decrement(ref _receivers);
}
