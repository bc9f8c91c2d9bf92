using Farm.Broker;
using Farm.Broker.Node;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Gateway.Tests;

/// <summary>The serve-here-or-forward policy against a directory the test controls, on a fake clock.</summary>
public sealed class OwnerRoutingTests : IDisposable
{
    private const string Self = "http://127.0.0.1:5480";
    private const string Other = "http://127.0.0.1:5481";

    private readonly WatchedClock _time = new();
    private readonly FakeDirectory _directory = new();
    private readonly OwnerChannels _channels = new();
    private readonly ForwardingOptions _options = new() { OwnerWait = TimeSpan.FromSeconds(10), OwnerPoll = TimeSpan.FromMilliseconds(100) };
    private readonly OwnerRouting _routing;

    public OwnerRoutingTests() => _routing = new OwnerRouting(_directory, _channels, _options, _time, NullLogger<OwnerRouting>.Instance);

    public void Dispose() => _channels.Dispose();

    private int _forwards;
    private readonly List<Metadata> _forwardHeaders = [];
    private readonly List<DateTime?> _forwardDeadlines = [];
    private readonly List<string> _forwardTargets = [];

    /// <summary>What the owner answers to the n-th forward (1-based); "forwarded" unless a test says otherwise.</summary>
    private Func<int, Task<string>> _ownerAnswers = _ => Task.FromResult("forwarded");

    /// <summary>What this node answers when it serves the call; "here" unless a test says otherwise.</summary>
    private Func<Task<string>> _hereAnswers = () => Task.FromResult("here");

    private Task<string> RouteAsync(ServerCallContext? context = null, bool hold = true) =>
        _routing.RouteAsync(new RoutedCall("Peek", "orders", Hold: hold), context ?? new TestCallContext(), _ => _hereAnswers(), Forward);

    /// <summary>The owner's side of a forward: counted and recorded, answered by <see cref="_ownerAnswers"/>.</summary>
    private AsyncUnaryCall<string> Forward(OwnerClients owner, CallOptions options)
    {
        _forwards++;
        _forwardHeaders.Add(options.Headers!);
        _forwardDeadlines.Add(options.Deadline);
        _forwardTargets.Add(owner.Channel.Target);
        return new AsyncUnaryCall<string>(_ownerAnswers(_forwards), Task.FromResult(new Metadata()), () => Status.DefaultSuccess, () => [], () => { });
    }

    [Fact]
    public async Task AnEntityServedHere_RunsHere()
    {
        _directory.Set(servedHere: true, owner: Self);

        Assert.Equal("here", await RouteAsync());
        Assert.Equal(0, _forwards);
    }

    /// <summary>
    /// A call this node serves runs at once; when it fails as between owners (the container moved a
    /// moment ago) it is held like any other, from a fresh look at the owner, and reaches the new one.
    /// </summary>
    [Fact]
    public async Task ACallServedHere_ThatFindsTheContainerJustMoved_IsHeldAndForwardedToTheNewOwner()
    {
        _directory.Set(servedHere: true, owner: Self);
        _directory.Database = new EntityLocation("orders", 1, false, Other, 2);
        var heres = 0;
        _hereAnswers = () =>
        {
            heres++;
            return Task.FromException<string>(FarmErrors.NotOwner("orders", null));
        };

        var routed = RouteAsync();
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded", await routed);
        Assert.Equal(1, heres);
        Assert.Equal("127.0.0.1:5481", Assert.Single(_forwardTargets));
        Assert.Equal(1, _directory.FreshLookups);
    }

    [Fact]
    public async Task AnEntityServedElsewhere_IsForwardedToItsOwner_MarkedDirect()
    {
        _directory.Set(servedHere: false, owner: Other);

        Assert.Equal("forwarded", await RouteAsync());
        Assert.Equal("127.0.0.1:5481", Assert.Single(_forwardTargets));
        Assert.True(FarmMetadata.IsDirect(Assert.Single(_forwardHeaders)));
    }

    [Fact]
    public async Task AForwardedCall_CarriesTheCallersDeadline()
    {
        _directory.Set(servedHere: false, owner: Other);
        var deadline = new DateTime(2030, 1, 1, 12, 0, 0, DateTimeKind.Utc);

        await RouteAsync(new TestCallContext(deadline: deadline));

        Assert.Equal(deadline, Assert.Single(_forwardDeadlines));
    }

    [Fact]
    public async Task BetweenOwners_TheCallIsHeld_UntilTheNewOwnerIsKnown()
    {
        _directory.Set(servedHere: false, owner: null);
        var routed = RouteAsync();
        _time.Advance(TimeSpan.FromSeconds(1));
        Assert.False(routed.IsCompleted);

        _directory.Set(servedHere: true, owner: Self);
        await AdvanceUntilAsync(routed);

        Assert.Equal("here", await routed);
        Assert.True(_directory.Lookups >= 2, $"looked up {_directory.Lookups} times");
    }

    /// <summary>
    /// A held call tries again with the owner as the farm database has it now, not as the last
    /// ownership pass saw it (a heartbeat ago): it reaches the new owner the moment it took over.
    /// </summary>
    [Fact]
    public async Task AHeldCall_AsksTheFarmDatabaseForTheOwner_WhenItTriesAgain()
    {
        _directory.Set(servedHere: false, owner: null);
        _directory.Database = new EntityLocation("orders", 1, false, Other, 2);

        var routed = RouteAsync();
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded", await routed);
        Assert.Equal("127.0.0.1:5481", Assert.Single(_forwardTargets));
        Assert.Equal(1, _directory.FreshLookups);
        Assert.Equal(2, _directory.Lookups);
    }

    [Fact]
    public async Task BetweenOwnersForLongerThanOwnerWait_TheCallFails_NotOwner()
    {
        _directory.Set(servedHere: false, owner: null);
        var start = _time.GetUtcNow();
        var routed = RouteAsync();

        _time.Advance(TimeSpan.FromSeconds(9));
        Assert.False(routed.IsCompleted);
        await AdvanceUntilAsync(routed);

        var error = await Assert.ThrowsAsync<BrokerException>(() => routed);
        Assert.Equal(FarmErrorCode.NotOwner, error.Code);
        Assert.True(_time.GetUtcNow() - start >= _options.OwnerWait);
    }

    private static RpcException PingTimeout()
    {
        var pingTimeout = new HttpRequestException(HttpRequestError.HttpProtocolError, "The HTTP/2 server didn't respond to a ping request within the configured KeepAlivePingDelay.",
            new HttpProtocolException(1, "The HTTP/2 server didn't respond to a ping request within the configured KeepAlivePingDelay.", null));
        return new RpcException(new Status(StatusCode.Internal, "Error starting gRPC call. " + pingTimeout.Message, pingTimeout));
    }

    /// <summary>
    /// A keep-alive ping a frozen owner never answered comes from Grpc.Net.Client as Internal. The
    /// call was sent, so it is not tried again while that owner is still the live one and does not
    /// answer (it may have committed it); once the farm names another owner it is held for it, not
    /// failed as Internal.
    /// </summary>
    [Fact]
    public async Task AConnectionThatBrokeUnderAForwardedCall_IsHeldForTheNextOwner_WhileTheOwnerDoesNotAnswer()
    {
        _directory.Set(servedHere: false, owner: Other);
        _ownerAnswers = _ => Task.FromException<string>(PingTimeout());
        var probes = 0;
        _routing.OwnerAnswersAsync = (_, _, _) => { Interlocked.Increment(ref probes); return Task.FromResult(false); };

        var routed = RouteAsync();
        for (var poll = 0; poll < 20; poll++)
        {
            // Each of the 20 is one of the router's looks at the farm, seen to happen (a lookup), not a guess at time.
            await AdvanceUntilLookedUpAsync(routed);
            Assert.False(routed.IsCompleted, $"gave up at poll {poll} while the owner it was sent to is still the live owner");
        }
        Assert.Equal(1, _forwards);
        Assert.True(probes >= 19, $"probed the silent owner {probes} times in 20 polls");

        _directory.Set(servedHere: true, owner: Self);
        await AdvanceUntilAsync(routed);

        Assert.Equal("here", await routed);
        Assert.Equal(1, _forwards);
    }

    /// <summary>
    /// A connection can break while the owner is fine (a ping sent while the network was out, whose
    /// answer came too late): the answer is lost for good, so once the owner answers again the call
    /// is forwarded again rather than held until the caller's deadline.
    /// </summary>
    [Fact]
    public async Task AConnectionThatBrokeUnderAForwardedCall_IsForwardedAgain_OnceTheOwnerAnswers()
    {
        _directory.Set(servedHere: false, owner: Other);
        _ownerAnswers = n => n == 1 ? Task.FromException<string>(PingTimeout()) : Task.FromResult("forwarded");
        var probed = new List<(string Owner, string Entity)>();
        _routing.OwnerAnswersAsync = (owner, entity, _) => { lock (probed) { probed.Add((owner, entity)); } return Task.FromResult(true); };

        var routed = RouteAsync();
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded", await routed);
        Assert.Equal(2, _forwards);
        Assert.Equal([(Other, "orders")], probed);
        Assert.All(_forwardTargets, target => Assert.Equal("127.0.0.1:5481", target));
    }

    /// <summary>
    /// A Settle forwarded again after its connection broke may find its settlements done by the
    /// lost try: the second try says it is a repeat (RepeatableTries), so the owner answers them as done.
    /// </summary>
    [Fact]
    public async Task ASettleForwardedAgain_AfterItsConnectionBroke_SaysItIsARepeat()
    {
        _directory.Set(servedHere: false, owner: Other);
        _routing.OwnerAnswersAsync = (_, _, _) => Task.FromResult(true);
        var tries = RepeatableTries.Of(new SettleRequest { Entity = "orders" });
        var sentAsRepeat = new List<bool>();

        var routed = _routing.RouteAsync(new RoutedCall("Settle", "orders"), new TestCallContext(),
            _ => Task.FromResult("here"),
            (owner, options) =>
            {
                sentAsRepeat.Add(tries.Next().Repeat);
                var answer = sentAsRepeat.Count == 1 ? Task.FromException<string>(PingTimeout()) : Task.FromResult("forwarded");
                return new AsyncUnaryCall<string>(answer, Task.FromResult(new Metadata()), () => Status.DefaultSuccess, () => [], () => { });
            });
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded", await routed);
        Assert.Equal([false, true], sentAsRepeat);
    }

    /// <summary>A break after the forward timeout (the owner was slow, then the connection went) is the same: held, not Internal.</summary>
    [Fact]
    public async Task AConnectionThatBrokeAfterTheForwardTimeout_IsHeldForTheNextOwner_NotFailedAsInternal()
    {
        _directory.Set(servedHere: false, owner: Other);
        var answer = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        _ownerAnswers = n => n == 1 ? answer.Task : Task.FromResult("forwarded by the next owner");
        _routing.OwnerAnswersAsync = (_, _, _) => Task.FromResult(false);

        var start = _time.GetUtcNow();
        var routed = RouteAsync();
        while (_time.GetUtcNow() - start < _options.ForwardTimeout + TimeSpan.FromSeconds(1))
        {
            await AdvanceUntilLookedUpAsync(routed);
        }
        Assert.False(routed.IsCompleted);
        answer.SetException(PingTimeout());
        for (var poll = 0; poll < 5; poll++)
        {
            await AdvanceUntilLookedUpAsync(routed);
            Assert.False(routed.IsCompleted, "gave up while the silent owner is still the live owner");
        }

        _directory.Set(servedHere: false, owner: "http://127.0.0.1:5482");
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded by the next owner", await routed);
        Assert.Equal(["127.0.0.1:5481", "127.0.0.1:5482"], _forwardTargets);
    }

    /// <summary>
    /// The owner's address leads nowhere for a while (its container was killed, or the network is
    /// out): no connection comes within the handler's connect timeout (5 s, past the 3 s forward
    /// timeout), which Grpc.Net.Client reports as Cancelled with a TimeoutException inside. The call
    /// never left, so it is held and tried again where the farm says the entity lives, not failed
    /// back to the client as a cancellation nobody asked for.
    /// </summary>
    [Fact]
    public async Task AForwardWhoseConnectionCannotBeSetUp_IsHeldAndTriedAgain_NotFailedAsCancelled()
    {
        _directory.Set(servedHere: false, owner: Other);
        var answer = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        _ownerAnswers = n => n == 1 ? answer.Task : Task.FromResult("answered by the second try");

        var start = _time.GetUtcNow();
        var routed = RouteAsync();
        while (_time.GetUtcNow() - start < _options.ForwardTimeout + TimeSpan.FromSeconds(1))
        {
            await AdvanceUntilLookedUpAsync(routed);
        }
        Assert.False(routed.IsCompleted);
        answer.SetException(new RpcException(new Status(StatusCode.Cancelled, "",
            new OperationCanceledException("The operation was canceled.", new TaskCanceledException("The operation was canceled.",
                new TimeoutException("A connection could not be established within the configured ConnectTimeout."))))));
        await AdvanceUntilAsync(routed);

        Assert.Equal("answered by the second try", await routed);
        Assert.Equal(["127.0.0.1:5481", "127.0.0.1:5481"], _forwardTargets);
    }

    /// <summary>
    /// The forward timeout passes, the farm already names another owner (the frozen one was taken
    /// over), and the connection to the old owner breaks as the gateway gives up on it (its keep-alive
    /// ping went unanswered meanwhile): the call is held for the new owner, not failed as Internal.
    /// </summary>
    [Fact]
    public async Task AConnectionThatBreaksAsTheGatewayGivesUpOnATakenOverOwner_IsHeldForTheNextOwner_NotFailedAsInternal()
    {
        _directory.Set(servedHere: false, owner: Other);
        _directory.Database = new EntityLocation("orders", 1, false, "http://127.0.0.1:5482", 2);
        var targets = new List<string>();

        var routed = _routing.RouteAsync(new RoutedCall("Send", "orders"), new TestCallContext(),
            _ => Task.FromResult("here"),
            (owner, options) =>
            {
                targets.Add(owner.Channel.Target);
                if (targets.Count > 1)
                {
                    return new AsyncUnaryCall<string>(Task.FromResult("forwarded by the next owner"), Task.FromResult(new Metadata()), () => Status.DefaultSuccess, () => [], () => { });
                }
                var answer = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
                options.CancellationToken.Register(() => answer.TrySetException(PingTimeout()));
                return new AsyncUnaryCall<string>(answer.Task, Task.FromResult(new Metadata()), () => Status.DefaultSuccess, () => [], () => { });
            });
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded by the next owner", await routed);
        Assert.Equal(["127.0.0.1:5481", "127.0.0.1:5482"], targets);
    }

    [Fact]
    public async Task AnErrorTheOwnerRaised_IsNotMistakenForABrokenConnection()
    {
        _directory.Set(servedHere: false, owner: Other);
        _ownerAnswers = _ => Task.FromException<string>(new RpcException(new Status(StatusCode.Internal, "a bug in the owner")));

        var error = await Assert.ThrowsAsync<RpcException>(() => RouteAsync());

        Assert.Equal(StatusCode.Internal, error.StatusCode);
        Assert.Equal(1, _forwards);
    }

    /// <summary>
    /// An owner shedding load answers SERVICE_BUSY as RESOURCE_EXHAUSTED: passed on at once, not held
    /// and forwarded again every OwnerPoll (that would add to the load of the node that asked for less).
    /// </summary>
    [Fact]
    public async Task AnOverloadedOwnersServiceBusy_IsPassedOnAtOnce_NotHeld()
    {
        _directory.Set(servedHere: false, owner: Other);
        _ownerAnswers = _ => Task.FromException<string>(Grpc.FarmErrorInterceptor.ToRpc(FarmErrors.Overloaded("behind its work")));

        var error = await Assert.ThrowsAsync<RpcException>(() => RouteAsync());

        Assert.Equal(StatusCode.ResourceExhausted, error.StatusCode);
        Assert.Equal("SERVICE_BUSY", error.FarmError());
        Assert.Equal(1, _forwards);
        Assert.Equal(1, _directory.Lookups);
    }

    /// <summary>The same for this node's own: an entity served here while this node sheds load fails at once.</summary>
    [Fact]
    public async Task ThisNodesOverloadedServiceBusy_FailsAtOnce_NotHeld()
    {
        _directory.Set(servedHere: true, owner: Self);
        var heres = 0;
        _hereAnswers = () =>
        {
            heres++;
            return Task.FromException<string>(FarmErrors.Overloaded("behind its work"));
        };

        var error = await Assert.ThrowsAsync<BrokerException>(() => RouteAsync());

        Assert.True(error.Overloaded);
        Assert.Equal(1, heres);
        Assert.Equal(0, _forwards);
    }

    /// <summary>A SERVICE_BUSY of an entity being handed over (UNAVAILABLE) is still held for the next owner.</summary>
    [Fact]
    public async Task AMovingEntitysServiceBusy_IsStillHeld_UntilTheOwnerServes()
    {
        _directory.Set(servedHere: false, owner: Other);
        _ownerAnswers = n => n == 1
            ? Task.FromException<string>(Grpc.FarmErrorInterceptor.ToRpc(FarmErrors.Busy("handing the container over")))
            : Task.FromResult("forwarded");

        var routed = RouteAsync();
        await AdvanceUntilAsync(routed);

        Assert.Equal("forwarded", await routed);
        Assert.Equal(2, _forwards);
    }

    /// <summary>
    /// A streamed send's own timeout (MessagingRouter.RouteStreamedSendAsync cancels the send's token
    /// when it passes) ends the hold: the send is given up at once, and it is neither run here nor
    /// forwarded when an owner turns up afterwards, so a send the client has already tried again
    /// elsewhere is not stored a second time.
    /// </summary>
    [Fact]
    public async Task AHeldSend_WhoseTimeoutPasses_IsGivenUp_AndNeverRunOrForwardedAfterwards()
    {
        _directory.Set(servedHere: false, owner: null);
        var heres = 0;
        _hereAnswers = () =>
        {
            heres++;
            return Task.FromResult("here");
        };
        using var timeout = new CancellationTokenSource();
        var routed = _routing.RouteAsync(new RoutedCall("Send", "orders"), direct: false, DateTime.MaxValue, _ => _hereAnswers(), Forward, timeout.Token);
        await AdvanceUntilLookedUpAsync(routed);
        Assert.False(routed.IsCompleted);

        await timeout.CancelAsync();

        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => routed.WaitAsync(TimeSpan.FromSeconds(10)));
        var lookups = _directory.Lookups;
        _directory.Set(servedHere: true, owner: Self);
        _time.Advance(_options.OwnerWait);
        Assert.Equal(0, heres);
        Assert.Equal(0, _forwards);
        Assert.Equal(lookups, _directory.Lookups);
    }

    /// <summary>
    /// The send stream's side of that timeout (MessagingRouter.RouteStreamedSendAsync): a send held
    /// past its own timeout is answered on the stream as a call whose deadline passed
    /// (DEADLINE_EXCEEDED, which the SDK retries as such), not as a cancelled or failed one.
    /// </summary>
    [Fact]
    public async Task AStreamedSend_HeldPastItsTimeout_IsAnsweredDeadlineExceeded()
    {
        _directory.Set(servedHere: false, owner: null);

        var failure = await StreamOneHeldSendAsync(TimeSpan.FromSeconds(1));

        Assert.Equal((int)StatusCode.DeadlineExceeded, failure.StatusCode);
        Assert.Equal(0, _forwards);
    }

    /// <summary>Without a timeout of its own the same send waits out the hold and gets the hold's answer.</summary>
    [Fact]
    public async Task AStreamedSend_WithoutATimeout_HeldPastTheOwnerWait_IsAnsweredWithTheHoldsError()
    {
        _directory.Set(servedHere: false, owner: null);

        var failure = await StreamOneHeldSendAsync(timeout: null);

        Assert.NotEqual((int)StatusCode.DeadlineExceeded, failure.StatusCode);
        Assert.Equal(FarmErrorCode.NotOwner, failure.ErrorCode);
    }

    /// <summary>
    /// One send over MessagingRouter.SendStream to an entity between owners, the fake clock moved one
    /// poll at a time until the stream has answered it; returns the answer's failure.
    /// </summary>
    private async Task<CallFailure> StreamOneHeldSendAsync(TimeSpan? timeout)
    {
        // No broker behind the router: the entity is never served here, so the local service is never called.
        var router = new MessagingRouter(new Farm.Broker.Messaging.MessagingService(null!), _routing, _channels, _options, _time, new StillRunning(),
            NullLogger<MessagingRouter>.Instance);
        var send = new StreamedSend { Id = 7, Send = new SendRequest { Entity = "orders", Messages = { new Message { Body = Google.Protobuf.ByteString.CopyFromUtf8("x") } } } };
        if (timeout is { } limit)
        {
            send.Timeout = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(limit);
        }
        var answers = new RecordingWriter<SendStreamResponse>();

        var streaming = router.SendStream(new OneRequest<SendStreamRequest>(new SendStreamRequest { Sends = { send } }), answers, new TestCallContext());
        for (var polls = 0; polls < 1000 && !streaming.IsCompleted; polls++)
        {
            await AdvanceUntilLookedUpAsync(streaming);
        }
        await streaming.WaitAsync(TimeSpan.FromSeconds(10));

        var result = Assert.Single(answers.Written.SelectMany(r => r.Results));
        Assert.Equal(7, result.Id);
        Assert.Null(result.Response);
        return Assert.IsType<CallFailure>(result.Failure);
    }

    private sealed class StillRunning : Microsoft.Extensions.Hosting.IHostApplicationLifetime
    {
        public CancellationToken ApplicationStarted => CancellationToken.None;

        public CancellationToken ApplicationStopping => CancellationToken.None;

        public CancellationToken ApplicationStopped => CancellationToken.None;

        public void StopApplication() => throw new NotSupportedException();
    }

    /// <summary>A request stream of one request, then its end.</summary>
    private sealed class OneRequest<T>(T request) : IAsyncStreamReader<T>
    {
        private bool _read;

        public T Current => request;

        public Task<bool> MoveNext(CancellationToken cancellationToken)
        {
            var next = !_read;
            _read = true;
            return Task.FromResult(next);
        }
    }

    private sealed class RecordingWriter<T> : IServerStreamWriter<T>
    {
        private readonly List<T> _written = [];

        public IReadOnlyList<T> Written
        {
            get
            {
                lock (_written)
                {
                    return [.. _written];
                }
            }
        }

        public WriteOptions? WriteOptions { get; set; }

        public Task WriteAsync(T message)
        {
            lock (_written)
            {
                _written.Add(message);
            }
            return Task.CompletedTask;
        }
    }

    [Fact]
    public async Task WithoutHold_BetweenOwnersFailsAtOnce()
    {
        _directory.Set(servedHere: false, owner: null);

        var error = await Assert.ThrowsAsync<BrokerException>(() => RouteAsync(hold: false));

        Assert.Equal(FarmErrorCode.NotOwner, error.Code);
        Assert.Equal(1, _directory.Lookups);
    }

    [Fact]
    public async Task ADirectCall_RunsHere_WithoutLookingUpOrForwarding()
    {
        _directory.Set(servedHere: false, owner: Other);

        Assert.Equal("here", await RouteAsync(TestCallContext.Direct()));
        Assert.Equal(0, _directory.Lookups);
        Assert.Equal(0, _forwards);
    }

    [Fact]
    public async Task AnEntityThatDoesNotExist_FailsAtOnce_WithoutHold()
    {
        _directory.Missing = true;

        var error = await Assert.ThrowsAsync<BrokerException>(() => RouteAsync());

        Assert.Equal(FarmErrorCode.MessagingEntityNotFound, error.Code);
        Assert.Equal(1, _directory.Lookups);
    }

    /// <summary>Moves the fake clock on, one look of the router at a time, until the call has finished (bounded by the test's own patience).</summary>
    private async Task AdvanceUntilAsync(Task routed)
    {
        for (var looks = 0; looks < 1000 && !routed.IsCompleted; looks++)
        {
            await AdvanceUntilLookedUpAsync(routed);
        }
        Assert.True(routed.IsCompleted, "the routed call did not finish");
    }

    /// <summary>Advances fake time one poll at a time until the router looks the entity up once more (or the call ends).</summary>
    private async Task AdvanceUntilLookedUpAsync(Task routed)
    {
        var looked = Volatile.Read(ref _directory.Lookups);
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
        while (!routed.IsCompleted && Volatile.Read(ref _directory.Lookups) == looked)
        {
            Assert.True(DateTime.UtcNow < deadline, "the router stopped looking at the farm while holding the call");
            // Only while the router sleeps on the clock: moved while its thread is still on the way to
            // its next wait, the clock would run ahead of it and eat its OwnerWait on a busy machine.
            if (_time.Armed > 0)
            {
                _time.Advance(_options.OwnerPoll);
            }
            await Task.Yield();
        }
    }

    private sealed class FakeDirectory : IOwnerDirectory
    {
        private readonly Lock _gate = new();
        private EntityLocation _location;

        public string Address => Self;

        public bool Missing { get; set; }

        public int Lookups;

        public void Set(bool servedHere, string? owner)
        {
            lock (_gate)
            {
                _location = new EntityLocation("orders", 1, servedHere, owner, 1);
            }
        }

        /// <summary>What the farm database says now, when it differs from the last ownership pass (null: the same).</summary>
        public EntityLocation? Database { get; set; }

        public int FreshLookups;

        public Task<EntityLocation> LocateAsync(string entityName, CancellationToken cancellationToken, bool fresh = false)
        {
            Interlocked.Increment(ref Lookups);
            if (fresh)
            {
                Interlocked.Increment(ref FreshLookups);
            }
            lock (_gate)
            {
                return Missing ? throw FarmErrors.EntityNotFound(entityName) : Task.FromResult(fresh && Database is { } now ? now : _location);
            }
        }

        public void Forget(string entityName)
        {
        }

        /// <summary>Never: these tests route every send (there is no broker behind them).</summary>
        public bool IsLoadedSendTargetHere(string entityPath) => false;
    }
}
