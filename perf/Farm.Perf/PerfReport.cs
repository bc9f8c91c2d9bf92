namespace Farm.Perf;

/// <summary>The JSON result of one run (snake_case names; see perf/README.md).</summary>
internal sealed record PerfReport(
    string Scenario,
    FarmFigures? Farm,
    PeerFigures? Peer,
    double? RatioFarmToPeer,
    MachineInfo Machine,
    DateTimeOffset Timestamp,
    string Command)
{
    /// <summary>farm / peer msg/s, the name issue 14 gives it (the same figure as ratio_farm_to_peer, kept for older readers).</summary>
    public double? Ratio => RatioFarmToPeer;

    /// <summary>single-queue --rounds N (N > 1): each round's figures, in the order run; the report's farm and peer are the median round's.</summary>
    public IReadOnlyList<RoundFigures>? Rounds { get; init; }
}

/// <summary>One round of single-queue --rounds: Farm, then the peer right after it.</summary>
internal sealed record RoundFigures(int Round, double? FarmMsgsPerSec, double? PeerMsgsPerSec, double? Ratio);

internal sealed record FarmFigures(
    double MsgsPerSec,
    double SentPerSec,
    double P50Ms,
    double P90Ms,
    double P99Ms,
    double P999Ms,
    long Messages,
    double DurationS,
    RunSettings Settings,
    Verification Verification);

internal sealed record RunSettings(
    int Senders,
    int Receivers,
    int Batch,
    int Prefetch,
    int Size,
    int Inflight,
    string ReceiveStyle,
    int Concurrency,
    double WarmupS,
    bool ExternalFarm);

/// <summary>
/// The exactly-once check over the whole run (warm-up, window and drain). For a topic, received and
/// lost count deliveries (message, subscription) and left_in_queue what the topic and its
/// subscriptions still hold.
/// </summary>
internal sealed record Verification(
    bool Passed,
    long Attempted,
    long Acknowledged,
    long ReceivedUnique,
    long Deliveries,
    long Lost,
    long Duplicates,
    long Foreign,
    long UnacknowledgedButDelivered,
    long SendErrors,
    long CompleteErrors,
    long ReceiveErrors,
    long LeftInQueue,
    IReadOnlyList<string> Problems)
{
    /// <summary>Sends an overloaded farm refused with SERVICE_BUSY (nothing stored, the sender told): load shed, not a failed check.</summary>
    public long SendsRefusedBusy { get; init; }

    /// <summary>Receive links an overloaded farm refused (SERVICE_BUSY), surfaced to the processor after the SDK's retries.</summary>
    public long ReceivesRefusedBusy { get; init; }

    /// <summary>Fan-out runs: subscriptions each message could reach (null for a queue).</summary>
    public int? Subscriptions { get; init; }

    /// <summary>Fan-out runs: deliveries the acknowledged messages owed (message x matching subscription).</summary>
    public long? ExpectedDeliveries { get; init; }

    /// <summary>Fan-out runs: deliveries to a subscription whose filter should not have selected the message.</summary>
    public long? Unexpected { get; init; }

    /// <summary>Runs with one receiver per subscription: deliveries after a higher sequence number of the same subscription.</summary>
    public long? OutOfOrder { get; init; }
}

/// <summary>
/// A peer measured in the same run: the SQLite storage ceiling or a RabbitMQ broker. Settings is the
/// peer's own record (<see cref="PeerSettings"/>, <see cref="Peers.RabbitMqSettings"/>); the fields
/// after it are filled by broker peers only (null ones are left out of the JSON).
/// </summary>
internal sealed record PeerFigures(
    string Name,
    double MsgsPerSec,
    long Messages,
    double DurationS,
    double? CommitsPerSec,
    object Settings)
{
    /// <summary>Publishes confirmed per second in the window.</summary>
    public double? SentPerSec { get; init; }

    public double? P50Ms { get; init; }

    public double? P90Ms { get; init; }

    public double? P99Ms { get; init; }

    public double? P999Ms { get; init; }

    /// <summary>The same exactly-once check as Farm's, over the peer's whole run.</summary>
    public Verification? Verification { get; init; }

    /// <summary>SQLite peer: bytes the process wrote to disk per message in the window (WAL and checkpoints).</summary>
    public double? DiskBytesPerMessage { get; init; }

    /// <summary>RabbitMQ measured with more than one producer/consumer count: each, this one the fastest.</summary>
    public IReadOnlyList<PeerTry>? Tried { get; init; }
}

/// <summary>One producer/consumer count the RabbitMQ peer was measured with, in the same run.</summary>
internal sealed record PeerTry(int Producers, int Consumers, double MsgsPerSec, double? P99Ms);

/// <param name="Lag">Rows kept between a row's insert and its delete beyond the batch before (a backlog).</param>
/// <param name="WalAutoCheckpointPages">Pages after which a commit checkpoints the WAL, as Farm's container databases.</param>
internal sealed record PeerSettings(int Batch, int Size, string JournalMode, string Synchronous, int Lag, int WalAutoCheckpointPages);
