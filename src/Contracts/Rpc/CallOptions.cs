namespace Farm.Contracts.Rpc;

/// <summary>Per-call settings: extra request headers, a deadline and a cancellation token.</summary>
public readonly record struct CallOptions(
    IReadOnlyDictionary<string, string>? Headers = null,
    DateTime? Deadline = null,
    CancellationToken CancellationToken = default);
