using System.Threading.Channels;
using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>
/// The "/farm.v1.Messaging/Receive" duplex stream behind a receiver. Credit is the number of
/// messages the broker may still push; the link keeps <c>buffered + outstanding credit</c> at the
/// target the receiver asks for, opens the stream lazily on the first credit, and reopens it after a
/// transient failure with the credit still outstanding (the new stream knows nothing of the old one).
/// A peek-lock stream also carries settlements once the broker said it takes them
/// (<see cref="TrySettleOnStreamAsync"/>).
/// </summary>
internal sealed class ReceiveLink : IAsyncDisposable
{
    private readonly FarmConnection _connection;
    private readonly string _entityPath;
    private readonly ReceiveMode _mode;
    private readonly Channel<ReceivedMessage> _buffer = Channel.CreateUnbounded<ReceivedMessage>(new UnboundedChannelOptions { SingleWriter = true });
    private readonly Lock _gate = new();

    // One writer at a time on the request stream; also orders the open before any credit.
    private readonly SemaphoreSlim _writeLock = new(1, 1);
    private readonly CancellationTokenSource _closing = new();
    private AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? _call;
    private int _outstanding;
    // Messages the receives in ReceiveAsync now asked for, together: the credit they need at once.
    private int _wanted;
    private Task? _pump;
    private TaskCompletionSource? _creditSignal;

    // Set while a drain waits for the broker's "drained": no credit is sent meanwhile.
    private TaskCompletionSource? _draining;

    // The stream whose broker said it takes settlements (ReceiveResponse.settles_on_stream), and the
    // settlements sent on it not answered yet, by id. Both end with the stream.
    private AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? _settleCall;
    // Whether that stream's broker adds a settlement's credit (ReceiveResponse.settle_credit).
    private bool _settleCredit;
    private readonly Dictionary<long, TaskCompletionSource<SettleResponse>> _settles = [];
    private long _nextSettleId;

    // Set when closing starts: settlements from then on go by call, not on the stream being closed,
    // and no credit is granted any more (close drains what is out).
    private bool _closingSettlements;

    /// <summary>How long closing waits for the answers to settlements sent on the stream.</summary>
    private static readonly TimeSpan SettleAnswersOnClose = TimeSpan.FromSeconds(5);
    private TaskCompletionSource<FarmException> _faultSignal = NewFaultSignal();
    /// <summary>Processor workers waiting for a message (<see cref="WaitForBufferedAsync"/>), the latest parked on top; under _gate.</summary>
    private readonly Stack<LinkWaiter> _parked = new();

    // The receiver's prefetch (0: none): what a settlement tops the credit up to, see SettleCreditLocked.
    private readonly int _prefetch;

    public ReceiveLink(FarmConnection connection, string entityPath, ReceiveMode mode, int prefetch = 0)
    {
        _connection = connection;
        _entityPath = entityPath;
        _mode = mode;
        _prefetch = prefetch;
    }

    public int BufferedCount => _buffer.Reader.Count;

    /// <summary>
    /// Waits up to <paramref name="maxWait"/> for a first message, then returns up to
    /// <paramref name="maxMessages"/> of what is buffered. <paramref name="creditTarget"/> is how
    /// many messages should be buffered or on their way while waiting; <paramref name="batchedCredit"/>
    /// tops it up only once at most half of it is (see <see cref="EnsureCreditAsync"/>).
    /// </summary>
    public async Task<List<ReceivedMessage>> ReceiveAsync(int maxMessages, TimeSpan maxWait, int creditTarget, CancellationToken cancellationToken, bool batchedCredit = false)
    {
        Task<FarmException> fault;
        int wanted;
        lock (_gate)
        {
            fault = _faultSignal.Task;
            wanted = _wanted += maxMessages;
        }

        try
        {
            // Receives made at once each get credit for what they asked (a receiver without a
            // prefetch would otherwise have eight receives wait on the credit of one).
            await EnsureCreditAsync(Math.Max(creditTarget, wanted), cancellationToken, batchedCredit && wanted <= creditTarget).ConfigureAwait(false);
            return await WaitForMessagesAsync(maxMessages, maxWait, fault, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            lock (_gate)
            {
                _wanted -= maxMessages;
            }
        }
    }

    /// <summary>What the receives still waiting asked for, together (this one's share is gone once it returned).</summary>
    public int Wanted
    {
        get
        {
            lock (_gate)
            {
                return _wanted;
            }
        }
    }

    private async Task<List<ReceivedMessage>> WaitForMessagesAsync(int maxMessages, TimeSpan maxWait, Task<FarmException> fault, CancellationToken cancellationToken)
    {
        var result = new List<ReceivedMessage>(Math.Min(maxMessages, 64));
        TakeFromBuffer(result, maxMessages);
        if (result.Count > 0)
        {
            return result;
        }

        using var timeout = new CancellationTokenSource(maxWait, _connection.TimeProvider);
        using var linked = CancellationTokenSource.CreateLinkedTokenSource(timeout.Token, cancellationToken, _closing.Token);
        while (result.Count == 0)
        {
            // ReadAsync hands each message that arrives to one waiting receive, the longest waiting.
            // WaitToReadAsync would wake every receive waiting on this link for each message (a
            // processor's workers all wait at once), and all but one would find nothing and wait
            // again: 4.3 thread-pool work items per message in the chain (perf/README "Session 34").
            var read = _buffer.Reader.ReadAsync(linked.Token).AsTask();
            if (await Task.WhenAny(read, fault).ConfigureAwait(false) == fault)
            {
                // Withdraw the read; a message it took before that is handed out, not dropped
                // (in ReceiveAndDelete the broker has deleted it already).
                await linked.CancelAsync().ConfigureAwait(false);
                if (await TakenAsync(read).ConfigureAwait(false) is { } taken)
                {
                    AddUnlessExpired(result, taken, _connection.TimeProvider.GetUtcNow());
                    TakeFromBuffer(result, maxMessages);
                    return result;
                }

                var error = await fault.ConfigureAwait(false);
                throw new FarmException(error.Message, error.Reason, error.EntityPath, error.InnerException);
            }

            ReceivedMessage first;
            try
            {
                first = await read.ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
            {
                // maxWait passed (or the link closed) with nothing to hand out.
                return result;
            }

            AddUnlessExpired(result, first, _connection.TimeProvider.GetUtcNow());
            TakeFromBuffer(result, maxMessages);
        }

        return result;
    }

    /// <summary>The message a withdrawn read took before it was withdrawn, or null.</summary>
    private static async Task<ReceivedMessage?> TakenAsync(Task<ReceivedMessage> read)
    {
        try
        {
            return await read.ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            return null;
        }
    }

    /// <summary>
    /// For a processor's worker: grants credit up to <paramref name="creditTarget"/> (a prefetch
    /// refill) and waits on <paramref name="waiter"/> until a message is buffered, the link closes, or
    /// <paramref name="cancellationToken"/> is cancelled; throws the fault that ended the stream for
    /// good. Each message buffered wakes one parked worker, the one that parked last, so workers
    /// waiting together are not all woken for one message. Nothing is allocated per wait; the
    /// receive that follows takes the message without waiting (or, when another worker took it
    /// first, the worker waits again).
    /// </summary>
    public ValueTask WaitForBufferedAsync(LinkWaiter waiter, int creditTarget, CancellationToken cancellationToken)
    {
        var credit = EnsureCreditAsync(creditTarget, cancellationToken, batched: true);
        return credit.IsCompletedSuccessfully ? WaitForBuffered(waiter, cancellationToken) : WaitForBufferedAfterAsync(waiter, credit, cancellationToken);
    }

    private async ValueTask WaitForBufferedAfterAsync(LinkWaiter waiter, ValueTask credit, CancellationToken cancellationToken)
    {
        await credit.ConfigureAwait(false);
        await WaitForBuffered(waiter, cancellationToken).ConfigureAwait(false);
    }

    private ValueTask WaitForBuffered(LinkWaiter waiter, CancellationToken cancellationToken)
    {
        waiter.Arm(cancellationToken);
        bool ready;
        lock (_gate)
        {
            // Parked under the lock the pump buffers under: a message buffered after this look wakes it.
            ready = _buffer.Reader.Count > 0 || _closing.IsCancellationRequested || cancellationToken.IsCancellationRequested;
            if (!ready)
            {
                _parked.Push(waiter);
            }
        }
        if (ready)
        {
            waiter.Wake();
        }
        return waiter.WaitAsync();
    }

    /// <summary>
    /// Wakes up to <paramref name="count"/> parked workers, under _gate. A waiter its token already
    /// woke is still on the stack: it is skipped (its wake finds nothing armed) and dropped.
    /// </summary>
    private void WakeParked(int count)
    {
        while (count > 0 && _parked.TryPop(out var waiter))
        {
            if (waiter.Wake())
            {
                count--;
            }
        }
    }

    /// <summary>
    /// Whether the settlements of this link's messages go on a stream whose broker adds the credit
    /// they carry (<see cref="SettleCreditLocked"/>): a receiver then leaves its prefetch refill to
    /// the settlement that follows a receive, or to its next receive, instead of a frame of its own.
    /// </summary>
    public bool SettlementsCarryCredit
    {
        get
        {
            lock (_gate)
            {
                return CarriesCreditLocked(_settleCall) && !_closingSettlements;
            }
        }
    }

    /// <summary>Whether a message is buffered: a woken worker that finds none waits again.</summary>
    public bool HasBuffered => _buffer.Reader.Count > 0;

    /// <summary>True when more is buffered or on its way than <paramref name="target"/>, with credit outstanding.</summary>
    public bool HasCreditBeyond(int target)
    {
        lock (_gate)
        {
            return _outstanding > 0 && _buffer.Reader.Count + _outstanding > target;
        }
    }

    /// <summary>Takes up to <paramref name="max"/> buffered messages without waiting.</summary>
    public List<ReceivedMessage> TakeBuffered(int max)
    {
        var taken = new List<ReceivedMessage>();
        TakeFromBuffer(taken, max);
        return taken;
    }

    /// <summary>
    /// Takes back the credit the broker has not used yet, so it sends (and, in ReceiveAndDelete,
    /// deletes) nothing the application did not ask for. Returns once the broker said "drained":
    /// every message it took before is in the buffer by then. A broker that does not answer within
    /// <paramref name="timeout"/> loses the stream (its credit goes with it).
    /// </summary>
    public async Task DrainAsync(TimeSpan timeout)
    {
        AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? call;
        TaskCompletionSource drained;
        lock (_gate)
        {
            if (_draining is { } pending)
            {
                drained = pending;
                call = null;
            }
            else if (_outstanding <= 0 || _closing.IsCancellationRequested)
            {
                return;
            }
            else if (_call is null)
            {
                // No stream holds the credit (between reopens): it simply is not granted again.
                _outstanding = 0;
                return;
            }
            else
            {
                drained = _draining = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                call = _call;
            }
        }

        if (call is not null)
        {
            await _writeLock.WaitAsync().ConfigureAwait(false);
            try
            {
                await call.RequestStream.WriteAsync(new ReceiveRequest { Drain = new ReceiveDrain() }, CancellationToken.None).ConfigureAwait(false);
            }
            catch (Exception e) when (e is RpcException or IOException or InvalidOperationException or ObjectDisposedException)
            {
                // The stream broke: the pump ends it, which ends the drain too.
            }
            finally
            {
                _writeLock.Release();
            }
        }

        try
        {
            await drained.Task.WaitAsync(timeout, _connection.TimeProvider).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            // No answer: end this stream rather than leave credit with a broker that may still use it.
            if (call is not null)
            {
                DisposeQuietly(call);
            }
            EndDrain();
        }
    }

    /// <summary>The stream holds no credit any more (drained, or gone): waiting senders of credit go on.</summary>
    private void EndDrain()
    {
        TaskCompletionSource? draining;
        lock (_gate)
        {
            _outstanding = 0;
            draining = _draining;
            _draining = null;
        }
        draining?.TrySetResult();
    }

    /// <summary>
    /// Grants credit so that buffered + outstanding reaches <paramref name="target"/>. With
    /// <paramref name="batched"/> (a prefetch refill) only once at most half the target is buffered
    /// or on its way, as an AMQP receiver renews link credit: a busy link then sends one credit
    /// frame per half a prefetch, not one per message taken, and the broker wakes for each as
    /// seldom; the half still on its way keeps the messages coming meanwhile.
    /// </summary>
    public async ValueTask EnsureCreditAsync(int target, CancellationToken cancellationToken, bool batched = false)
    {
        if (Volatile.Read(ref _draining) is { } draining)
        {
            await draining.Task.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? call;
        int grant;
        lock (_gate)
        {
            if (_pump is { IsCompleted: true } && !_closing.IsCancellationRequested)
            {
                // A pump that ended holds no stream, so none of its credit is on its way any more.
                _outstanding = 0;
            }

            if (_closingSettlements || _closing.IsCancellationRequested)
            {
                return;
            }
            grant = TakeRefillLocked(target, batched);
            if (grant == 0)
            {
                return;
            }

            call = _call;
            if (_pump is null || _pump.IsCompleted)
            {
                _pump = Task.Run(PumpAsync, CancellationToken.None);
            }
            else if (call is null)
            {
                _creditSignal?.TrySetResult();
            }
        }

        if (call is null)
        {
            // The pump opens (or reopens) the stream with all outstanding credit.
            return;
        }

        await _writeLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await call.RequestStream.WriteAsync(new ReceiveRequest { Credit = grant }, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RpcException or IOException or HttpRequestException or InvalidOperationException or ObjectDisposedException)
        {
            // The stream broke (HttpRequestException: the owner reset the HTTP/2 stream); the pump
            // notices on its read side and reopens with the outstanding credit.
        }
        finally
        {
            _writeLock.Release();
        }
    }

    /// <summary>
    /// Settles over the receive stream, when its broker said it takes settlements there: its answer,
    /// or null when no such stream is open now (the caller makes a Settle call). Throws
    /// <see cref="SettleStreamLostException"/> when the stream broke before the answer came: the
    /// outcome is unknown, and a Settle call finds it (done again, or MessageLockLost).
    /// </summary>
    public async Task<SettleResponse?> TrySettleOnStreamAsync(SettleRequest request)
    {
        AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call;
        long id;
        var answered = new TaskCompletionSource<SettleResponse>(TaskCreationOptions.RunContinuationsAsynchronously);
        lock (_gate)
        {
            if (_settleCall is null || !ReferenceEquals(_settleCall, _call) || _closingSettlements || _closing.IsCancellationRequested)
            {
                return null;
            }
            call = _settleCall;
            id = ++_nextSettleId;
            _settles[id] = answered;
        }

        try
        {
            await _writeLock.WaitAsync().ConfigureAwait(false);
        }
        catch (ObjectDisposedException)
        {
            // The receiver closed meanwhile: nothing was sent.
            ForgetSettle(id);
            return null;
        }
        try
        {
            int credit;
            lock (_gate)
            {
                // Counted under the write lock: a drain asked for meanwhile either is seen here (no
                // credit) or is written after this settle, and then takes this credit back too.
                credit = SettleCreditLocked(call);
            }
            var settle = new ReceiveSettle { Id = id, AcceptsAllSucceeded = true, Credit = credit };
            settle.Settlements.AddRange(request.Settlements);
            await call.RequestStream.WriteAsync(new ReceiveRequest { Settle = settle }, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RpcException or IOException or HttpRequestException or InvalidOperationException or ObjectDisposedException)
        {
            ForgetSettle(id);
            throw new SettleStreamLostException(e);
        }
        finally
        {
            _writeLock.Release();
        }

        return await answered.Task.ConfigureAwait(false);
    }

    /// <summary>
    /// The credit a settlement carries, under _gate: what a prefetch refill
    /// (<see cref="EnsureCreditAsync"/>, batched) would grant now, counted as outstanding. A lone
    /// message's receiver then sends its settlement and no credit frame of its own, and the
    /// broker reads one request for both. Nothing without a prefetch (credit follows the receives
    /// asked for), while a drain waits, when the stream's broker does not add it, or when the
    /// settlement goes on a stream that is no longer the link's.
    /// </summary>
    private int SettleCreditLocked(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call)
    {
        // Only on the stream that holds the credit: counted for a stream replaced meanwhile, the
        // new one would never get it, and the link would wait for messages the broker owes nobody.
        if (_prefetch <= 0 || Volatile.Read(ref _draining) is not null || !CarriesCreditLocked(call))
        {
            return 0;
        }
        return TakeRefillLocked(_prefetch, batched: true);
    }

    /// <summary>Under _gate: whether <paramref name="call"/> is the link's stream and its broker adds a settlement's credit.</summary>
    private bool CarriesCreditLocked(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? call) =>
        _settleCredit && call is not null && ReferenceEquals(_settleCall, call) && ReferenceEquals(_call, call);

    /// <summary>
    /// Under _gate: the credit that brings buffered + outstanding up to <paramref name="target"/>,
    /// counted as outstanding; 0 when nothing is missing or, <paramref name="batched"/>, while more
    /// than half of the target is still buffered or on its way (one rule for credit frames and
    /// for the credit settlements carry).
    /// </summary>
    private int TakeRefillLocked(int target, bool batched)
    {
        var have = _buffer.Reader.Count + _outstanding;
        var grant = target - have;
        if (grant <= 0 || (batched && have > target / 2))
        {
            return 0;
        }
        _outstanding += grant;
        return grant;
    }

    private void ForgetSettle(long id)
    {
        lock (_gate)
        {
            _settles.Remove(id);
        }
    }

    /// <summary>One settlement's success, for an answer that said all succeeded (read only: never changed).</summary>
    private static readonly SettleResult SucceededResult = new() { ErrorCode = FarmErrorCode.Unspecified };

    /// <summary>The broker's answer to a settle sent on the stream.</summary>
    private void OnSettled(ReceiveSettled settled)
    {
        TaskCompletionSource<SettleResponse>? answered;
        lock (_gate)
        {
            _settles.Remove(settled.Id, out answered);
        }

        if (answered is null)
        {
            return;
        }

        if (settled.ErrorCode != FarmErrorCode.Unspecified)
        {
            answered.TrySetException(FarmErrors.FromErrorCode(settled.ErrorCode, settled.ErrorMessage, _entityPath));
            return;
        }

        var response = new SettleResponse();
        if (settled.AllSucceeded > 0)
        {
            for (var i = 0; i < settled.AllSucceeded; i++)
            {
                response.Results.Add(SucceededResult);
            }
        }
        else
        {
            response.Results.AddRange(settled.Results);
        }
        answered.TrySetResult(response);
    }

    /// <summary>Stops the stream; returns the messages still buffered (their locks are still held).</summary>
    public async Task<List<ReceivedMessage>> CloseAsync()
    {
        // Settlements sent on the stream get their answers before it is cut: cut first, their outcome
        // would be unknown and the Settle call made for them could find the locks already gone.
        Task[] answers;
        lock (_gate)
        {
            _closingSettlements = true;
            answers = [.. _settles.Values.Select(s => (Task)s.Task)];
        }
        if (answers.Length > 0)
        {
            await Task.WhenAny(Task.WhenAll(answers), Task.Delay(SettleAnswersOnClose, _connection.TimeProvider)).ConfigureAwait(false);
        }

        // Take the credit back before cutting the stream. Cut with credit outstanding, the broker may
        // lock messages for this stream just as it goes (more so through a proxying gateway, which
        // passes the cut on a moment later): nobody reads them, and they wait out their lock. Drained,
        // everything it took is in the buffer, and the receiver abandons it.
        await DrainAsync(SettleAnswersOnClose).ConfigureAwait(false);

        Task? pump;
        lock (_gate)
        {
            if (_closing.IsCancellationRequested)
            {
                return [];
            }

            _closing.Cancel();
            pump = _pump;
        }

        lock (_gate)
        {
            WakeParked(int.MaxValue);
        }

        if (pump is not null)
        {
            await pump.ConfigureAwait(false);
        }

        var left = new List<ReceivedMessage>();
        while (_buffer.Reader.TryRead(out var message))
        {
            left.Add(message);
        }

        return left;
    }

    public async ValueTask DisposeAsync()
    {
        await CloseAsync().ConfigureAwait(false);
        _closing.Dispose();
        _writeLock.Dispose();
    }

    private void TakeFromBuffer(List<ReceivedMessage> into, int max)
    {
        var now = _connection.TimeProvider.GetUtcNow();
        while (into.Count < max && _buffer.Reader.TryRead(out var message))
        {
            AddUnlessExpired(into, message, now);
        }
    }

    private void AddUnlessExpired(List<ReceivedMessage> into, ReceivedMessage message, DateTimeOffset now)
    {
        // A peek-lock message whose lock ran out while buffered is the broker's again (it will be
        // redelivered); handing it out would only end in MessageLockLost.
        if (_mode == ReceiveMode.PeekLock && message.LockedUntil is { } until && until.ToDateTimeOffset() <= now)
        {
            return;
        }

        into.Add(message);
    }

    private async Task PumpAsync()
    {
        var token = _closing.Token;
        var failures = 0;
        while (!token.IsCancellationRequested)
        {
            Task? waitForCredit = null;
            lock (_gate)
            {
                if (_outstanding <= 0)
                {
                    _creditSignal = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                    waitForCredit = _creditSignal.Task;
                }
            }

            if (waitForCredit is not null)
            {
                try
                {
                    await waitForCredit.WaitAsync(token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }

                continue;
            }

            AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? call = null;
            FarmConnection.Route route = default;
            // The first reopen after a lost connection goes elsewhere at once (FarmRetryPolicy.RetriesAtOnce).
            var reopenAtOnce = false;
            try
            {
                route = await _connection.RouteAsync(isEntityMessaging: true, _entityPath, token).ConfigureAwait(false);
                call = route.Channel.Receive(new CallOptions(route.Headers, cancellationToken: token));
                await OpenAsync(call, token).ConfigureAwait(false);
                await foreach (var response in call.ResponseStream.ReadAllAsync(token).ConfigureAwait(false))
                {
                    failures = 0;
                    lock (_gate)
                    {
                        foreach (var message in response.Messages)
                        {
                            _buffer.Writer.TryWrite(message);
                        }

                        _outstanding = Math.Max(0, _outstanding - response.Messages.Count);
                        if (response.SettlesOnStream)
                        {
                            _settleCall = call;
                            _settleCredit = response.SettleCredit;
                        }
                        WakeParked(response.Messages.Count);
                    }

                    if (response.Settled is { } settled)
                    {
                        OnSettled(settled);
                    }

                    if (response.Drained)
                    {
                        EndDrain();
                    }
                }

                // The server ended the stream cleanly (e.g. draining for shutdown): reopen elsewhere or later.
                failures++;
            }
            catch (Exception e) when (token.IsCancellationRequested && e is OperationCanceledException or RpcException { StatusCode: StatusCode.Cancelled })
            {
                return;
            }
            catch (Exception e)
            {
                // Whatever broke the stream (a reset, a server that ended it, a write after the end),
                // the pump reopens it; only cancellation by the receiver ends the pump.
                var error = e switch
                {
                    // Cancelled though this receiver did not ask: the call was torn down under the
                    // stream ("gRPC call disposed." when its connection failed over), a broken
                    // stream like any other, not an error to hand the application.
                    RpcException { StatusCode: StatusCode.Cancelled } rpc =>
                        new FarmException($"The receive stream was cut off: {rpc.Status.Detail}", FarmFailureReason.ServiceCommunicationProblem, _entityPath, rpc),
                    RpcException rpc => FarmErrors.FromRpc(rpc, _entityPath),
                    FarmException farm => farm,
                    _ => new FarmException($"The receive stream failed: {e.Message}", FarmFailureReason.ServiceCommunicationProblem, _entityPath, e),
                };
                if (route.Channel is not null)
                {
                    _connection.ReportFailure(route, (e as RpcException)?.AsUnavailableWhenBroken()
                        ?? new RpcException(new Status(StatusCode.Unavailable, error.Message)));
                }

                failures++;
                reopenAtOnce = failures == 1 && _connection.Retry.RetriesAtOnce(error, attemptNumber: 0);
                if (!error.IsTransient || failures > _connection.Retry.Options.MaxRetries)
                {
                    Fault(error);
                    return;
                }
            }
            finally
            {
                List<TaskCompletionSource<SettleResponse>> unanswered;
                lock (_gate)
                {
                    if (ReferenceEquals(_call, call))
                    {
                        _call = null;
                    }

                    // Settlements are sent only on the current stream: whatever waits was sent on this one.
                    _settleCall = null;
                    _settleCredit = false;
                    unanswered = [.. _settles.Values];
                    _settles.Clear();
                }

                foreach (var answered in unanswered)
                {
                    answered.TrySetException(new SettleStreamLostException(null));
                }

                if (call is not null)
                {
                    DisposeQuietly(call);
                }

                if (Volatile.Read(ref _draining) is not null)
                {
                    // The stream that held the credit is gone: the drain is over.
                    EndDrain();
                }
            }

            if (failures > 0 && !reopenAtOnce)
            {
                try
                {
                    await Task.Delay(Backoff(failures), _connection.TimeProvider, token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
            }
        }
    }

    private async Task OpenAsync(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call, CancellationToken token)
    {
        await _writeLock.WaitAsync(token).ConfigureAwait(false);
        try
        {
            int credit;
            lock (_gate)
            {
                _call = call;
                credit = Math.Max(1, _outstanding);
                _outstanding = credit;
            }

            // Peek-lock: offer to settle on this stream; the broker says yes (or nothing) in its first response.
            var open = new ReceiveOpen { Entity = _entityPath, Mode = _mode, Credit = credit, SettleOnStream = _mode == ReceiveMode.PeekLock && _connection.Options.SettleOnReceiveStream };
            await call.RequestStream.WriteAsync(new ReceiveRequest { Open = open }, token).ConfigureAwait(false);
        }
        finally
        {
            _writeLock.Release();
        }
    }

    private void Fault(FarmException error)
    {
        lock (_gate)
        {
            // Pending receives throw; the next receive starts a fresh pump with fresh credit.
            _outstanding = 0;
            var signal = _faultSignal;
            _faultSignal = NewFaultSignal();
            signal.TrySetResult(error);
            while (_parked.TryPop(out var waiter))
            {
                waiter.Fail(new FarmException(error.Message, error.Reason, error.EntityPath, error.InnerException));
            }
        }
    }

    private TimeSpan Backoff(int failures)
    {
        var options = _connection.Retry.Options;
        var baseDelay = options.Mode == FarmRetryMode.Fixed
            ? options.Delay
            : TimeSpan.FromTicks((long)Math.Min(options.MaxDelay.Ticks, options.Delay.Ticks * Math.Pow(2, Math.Min(failures - 1, 20))));
        var jitter = 0.8 + (Random.Shared.NextDouble() * 0.4);
        return TimeSpan.FromTicks((long)(Math.Min(baseDelay.Ticks, options.MaxDelay.Ticks) * jitter));
    }

    private static void DisposeQuietly(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call)
    {
        try
        {
            // Cancels the call if it is still open.
            call.Dispose();
        }
        catch (Exception e) when (e is RpcException or IOException or ObjectDisposedException or OperationCanceledException)
        {
            // Cancelling an already broken call may fail; the call is gone either way.
        }
    }

    private static TaskCompletionSource<FarmException> NewFaultSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}

/// <summary>
/// A receive stream broke with settlements sent on it and not answered: their outcome is unknown.
/// The receiver settles them again by a Settle call.
/// </summary>
internal sealed class SettleStreamLostException(Exception? cause)
    : Exception("The receive stream broke before the broker answered the settlements sent on it.", cause);

