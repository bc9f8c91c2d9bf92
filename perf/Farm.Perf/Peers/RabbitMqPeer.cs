using System.Diagnostics;
using System.Globalization;
using System.Text;
using Farm.Perf.Load;
using RabbitMQ.Client;
using RabbitMQ.Client.Events;

namespace Farm.Perf.Peers;

/// <summary>How the RabbitMQ peer is driven (the JSON's <c>peer.settings</c>).</summary>
/// <param name="QueueType">classic or quorum; durable either way.</param>
/// <param name="Producers">Publishers, each with its own connection and channel (Farm's --senders).</param>
/// <param name="ConfirmWindow">Publishes awaiting their confirm, per producer.</param>
/// <param name="Consumers">Consumers, each with its own connection and channel (Farm's --receivers).</param>
/// <param name="Prefetch">basic.qos prefetch count per consumer.</param>
/// <param name="AckEvery">A consumer acks with multiple=true after this many deliveries.</param>
/// <param name="Size">Body bytes.</param>
/// <param name="WarmupS">Load before the window, as Farm's.</param>
/// <param name="ServerVersion">What the broker said it is.</param>
/// <param name="Client">The client library driving it.</param>
/// <param name="Tuning">How the defaults were chosen (perf/README.md has the figures).</param>
internal sealed record RabbitMqSettings(
    string QueueType,
    int Producers,
    int ConfirmWindow,
    int Consumers,
    int Prefetch,
    int AckEvery,
    int Size,
    bool Persistent,
    double WarmupS,
    string ServerVersion,
    string Client,
    string Tuning);

/// <summary>
/// RabbitMQ as the broker peer of single-queue, under the same workload Farm gets: a durable queue,
/// persistent messages with the same body, an id and the send time, producers with publisher
/// confirms and a window of publishes in flight, consumers with manual acks, a prefetch and
/// multiple acks; the same warm-up, window, drain and exactly-once check (<see cref="RunState"/>,
/// <see cref="LoadRun"/>). The broker is started elsewhere (perf/run.sh starts a throwaway one).
/// </summary>
internal sealed class RabbitMqPeer(RabbitMqSettings settings, Uri uri, TimeSpan duration)
{
    public const string ClientName = "RabbitMQ.Client 7.2.2";

    /// <summary>How the defaults were chosen; goes into the JSON with the settings.</summary>
    public const string Tuning =
        "as RabbitMQ's docs advise: publisher confirms handled asynchronously with a window of "
        + "publishes in flight (the broker confirms many at once, multiple=true), prefetch of a few "
        + "hundred, consumers ack every N deliveries with multiple=true, one connection per producer "
        + "and per consumer; the defaults are the best of a sweep on the reference machine (perf/README.md)";

    /// <summary>
    /// Producers and consumers RabbitMQ did best with in the tuning sweep (perf/README.md): 2 and 2
    /// beat 1 and 1. Against 4 and 4 it won two runs of three in session 33 and lost the third
    /// (quorum: 9,154 against 13,691 msg/s), so single-queue measures both.
    /// </summary>
    public static readonly (int Producers, int Consumers) SweptBestShape = (2, 2);

    private const string SentAtHeader = RunState.SentAtProperty;

    public string Name => $"rabbitmq-{settings.QueueType}";

    public async Task<PeerFigures> RunAsync(CancellationToken cancellationToken)
    {
        var factory = new ConnectionFactory
        {
            Uri = uri,
            ClientProvidedName = "farm-perf",
            // One delivery at a time per consumer: multiple acks cover everything up to a tag, in order.
            ConsumerDispatchConcurrency = 1,
        };
        var queue = $"perf-single-{Guid.NewGuid():N}"[..24];
        await using var admin = await factory.CreateConnectionAsync("farm-perf-admin", cancellationToken).ConfigureAwait(false);
        var serverVersion = ServerVersionOf(admin);
        await using var adminChannel = await admin.CreateChannelAsync(cancellationToken: cancellationToken).ConfigureAwait(false);
        var arguments = new Dictionary<string, object?> { ["x-queue-type"] = settings.QueueType };
        await adminChannel.QueueDeclareAsync(queue, durable: true, exclusive: false, autoDelete: false, arguments, cancellationToken: cancellationToken).ConfigureAwait(false);

        var state = new RunState();
        var consumers = new List<Consumer>();
        try
        {
            for (var i = 0; i < settings.Consumers; i++)
            {
                consumers.Add(await Consumer.StartAsync(factory, queue, settings, state, cancellationToken).ConfigureAwait(false));
            }

            using var stopSending = new CancellationTokenSource();
            var body = CreateBody(settings.Size);
            var producers = Enumerable.Range(0, settings.Producers)
                .Select(_ => Task.Run(() => ProduceAsync(factory, queue, body, state, stopSending.Token), CancellationToken.None))
                .ToArray();

            Console.Error.WriteLine($"perf: peer {Name} ({serverVersion}) on {uri.Host}:{uri.Port}, queue {queue}: warm-up {settings.WarmupS:0.#} s, measuring {duration.TotalSeconds:0.#} s");
            var window = await LoadRun.MeasureAsync(state, $"peer {Name}", TimeSpan.FromSeconds(settings.WarmupS), duration, cancellationToken).ConfigureAwait(false);
            await stopSending.CancelAsync().ConfigureAwait(false);
            await Task.WhenAll(producers).ConfigureAwait(false);
            var drained = await LoadRun.DrainAsync(state, cancellationToken).ConfigureAwait(false);
            foreach (var consumer in consumers)
            {
                await consumer.StopAsync(cancellationToken).ConfigureAwait(false);
            }

            var left = await LeftInQueueAsync(admin, queue, cancellationToken).ConfigureAwait(false);
            var verification = LoadRun.Verify(state, left, drained);
            return new PeerFigures(
                Name,
                MsgsPerSec: window.DeliveredPerSec,
                Messages: window.Delivered,
                DurationS: Math.Round(window.Seconds, 3),
                CommitsPerSec: null,
                Settings: settings with { ServerVersion = serverVersion })
            {
                SentPerSec = window.AckedPerSec,
                P50Ms = Math.Round(state.Latency.PercentileMs(0.50), 2),
                P90Ms = Math.Round(state.Latency.PercentileMs(0.90), 2),
                P99Ms = Math.Round(state.Latency.PercentileMs(0.99), 2),
                P999Ms = Math.Round(state.Latency.PercentileMs(0.999), 2),
                Verification = verification,
            };
        }
        finally
        {
            foreach (var consumer in consumers)
            {
                await consumer.DisposeAsync().ConfigureAwait(false);
            }

            await DeleteQuietlyAsync(adminChannel, queue).ConfigureAwait(false);
        }
    }

    private static async Task DeleteQuietlyAsync(IChannel channel, string queue)
    {
        try
        {
            await channel.QueueDeleteAsync(queue, cancellationToken: CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e) when (PeerRun.IsPeerFailure(e))
        {
            // The run's own failure (the broker went away) is the one to report, not this.
            Console.Error.WriteLine($"perf: could not delete queue {queue}: {e.Message}");
        }
    }

    /// <summary>
    /// One producer: its own connection and a confirm-mode channel. Confirms are tracked here rather
    /// than by the client awaiting each publish, so the broker's multiple=true confirms settle a
    /// whole run of publishes at once, and the window is a semaphore of publishes not yet confirmed.
    /// </summary>
    private async Task ProduceAsync(ConnectionFactory factory, string queue, ReadOnlyMemory<byte> body, RunState state, CancellationToken stop)
    {
        await using var connection = await factory.CreateConnectionAsync("farm-perf-producer", CancellationToken.None).ConfigureAwait(false);
        var options = new CreateChannelOptions(publisherConfirmationsEnabled: true, publisherConfirmationTrackingEnabled: false);
        await using var channel = await connection.CreateChannelAsync(options, CancellationToken.None).ConfigureAwait(false);
        var confirms = new ConfirmTracker(state, settings.ConfirmWindow);
        channel.BasicAcksAsync += (_, e) =>
        {
            confirms.Settle(e.DeliveryTag, e.Multiple, acked: true);
            return Task.CompletedTask;
        };
        channel.BasicNacksAsync += (_, e) =>
        {
            confirms.Settle(e.DeliveryTag, e.Multiple, acked: false);
            return Task.CompletedTask;
        };

        while (!stop.IsCancellationRequested)
        {
            try
            {
                await confirms.WaitForRoomAsync(stop).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                break;
            }

            var id = state.ReserveIds(1);
            var properties = new BasicProperties
            {
                MessageId = id.ToString(CultureInfo.InvariantCulture),
                DeliveryMode = DeliveryModes.Persistent,
                Headers = new Dictionary<string, object?> { [SentAtHeader] = Stopwatch.GetTimestamp() },
            };
            var tag = await channel.GetNextPublishSequenceNumberAsync(CancellationToken.None).ConfigureAwait(false);
            confirms.OnPublishing(tag, id);
            try
            {
                await channel.BasicPublishAsync(string.Empty, queue, mandatory: false, properties, body, CancellationToken.None).ConfigureAwait(false);
            }
            catch (Exception e) when (e is RabbitMQ.Client.Exceptions.OperationInterruptedException or RabbitMQ.Client.Exceptions.AlreadyClosedException or IOException)
            {
                confirms.Settle(tag, multiple: false, acked: false);
                state.OnSendError(e);
                break;
            }
        }

        // Every publish's fate is known before the drain starts: wait for the last confirms.
        await confirms.WaitForAllAsync(TimeSpan.FromSeconds(30)).ConfigureAwait(false);
    }

    private static async Task<long> LeftInQueueAsync(IConnection connection, string queue, CancellationToken cancellationToken)
    {
        await using var channel = await connection.CreateChannelAsync(cancellationToken: cancellationToken).ConfigureAwait(false);
        var declared = await channel.QueueDeclarePassiveAsync(queue, cancellationToken).ConfigureAwait(false);
        return declared.MessageCount;
    }

    private static string ServerVersionOf(IConnection connection)
    {
        var properties = connection.ServerProperties;
        string Text(string key) => properties is not null && properties.TryGetValue(key, out var value) && value is byte[] bytes ? Encoding.UTF8.GetString(bytes) : "?";
        return $"{Text("product")} {Text("version")}";
    }

    private static ReadOnlyMemory<byte> CreateBody(int size)
    {
        // The same random body as Farm's senders (SendLoad): nothing can take a shortcut on it.
        var body = new byte[size];
        new Random(42).NextBytes(body);
        return body;
    }

    /// <summary>
    /// A producer's publishes awaiting their confirm, by delivery tag. The broker confirms in tag
    /// order, often many at once (multiple=true: every tag up to this one).
    /// </summary>
    private sealed class ConfirmTracker(RunState state, int window)
    {
        private readonly Lock _lock = new();
        private readonly Dictionary<ulong, long> _pending = new(window);
        private readonly SemaphoreSlim _room = new(window, window);
        private readonly TaskCompletionSource _empty = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private ulong _lowest = ulong.MaxValue;
        private bool _draining;

        public Task WaitForRoomAsync(CancellationToken stop) => _room.WaitAsync(stop);

        public void OnPublishing(ulong tag, long id)
        {
            state.OnSending(id, 1);
            lock (_lock)
            {
                _pending.Add(tag, id);
                _lowest = Math.Min(_lowest, tag);
            }
        }

        public void Settle(ulong tag, bool multiple, bool acked)
        {
            var settled = 0;
            lock (_lock)
            {
                if (multiple)
                {
                    for (var t = _lowest; t <= tag && _pending.Count > 0; t++)
                    {
                        settled += SettleOne(t, acked) ? 1 : 0;
                    }

                    _lowest = Math.Max(_lowest, tag + 1);
                }
                else
                {
                    settled += SettleOne(tag, acked) ? 1 : 0;
                    if (tag == _lowest)
                    {
                        while (_pending.Count > 0 && !_pending.ContainsKey(_lowest))
                        {
                            _lowest++;
                        }
                    }
                }

                if (_draining && _pending.Count == 0)
                {
                    _empty.TrySetResult();
                }
            }

            if (settled > 0)
            {
                _room.Release(settled);
            }
        }

        private bool SettleOne(ulong tag, bool acked)
        {
            if (!_pending.Remove(tag, out var id))
            {
                return false;
            }

            if (acked)
            {
                state.OnAcked(id, 1);
            }
            else
            {
                // A nack: not stored; if it arrives after all, the check counts it as unacknowledged but delivered.
                state.OnSendFailed(id, 1);
                state.OnSendError(new InvalidOperationException($"the broker nacked publish {tag} (message {id})"));
            }

            return true;
        }

        public async Task WaitForAllAsync(TimeSpan timeout)
        {
            lock (_lock)
            {
                _draining = true;
                if (_pending.Count == 0)
                {
                    return;
                }
            }

            try
            {
                await _empty.Task.WaitAsync(timeout).ConfigureAwait(false);
            }
            catch (TimeoutException e)
            {
                int left;
                lock (_lock)
                {
                    left = _pending.Count;
                }

                state.OnSendError(new TimeoutException($"{left} publishes were neither confirmed nor nacked within {timeout.TotalSeconds:0} s", e));
            }
        }
    }

    /// <summary>
    /// One consumer: its own connection and channel, prefetch, manual acks with multiple=true every
    /// <see cref="RabbitMqSettings.AckEvery"/> deliveries (the rest when it stops).
    /// </summary>
    private sealed class Consumer : IAsyncDisposable
    {
        private readonly IConnection _connection;
        private readonly IChannel _channel;
        private readonly int _ackEvery;
        private readonly RunState _state;
        private string _consumerTag = string.Empty;
        private ulong _lastTag;
        private ulong _lastAcked;
        private int _unacked;

        private Consumer(IConnection connection, IChannel channel, int ackEvery, RunState state)
        {
            _connection = connection;
            _channel = channel;
            _ackEvery = ackEvery;
            _state = state;
        }

        public static async Task<Consumer> StartAsync(ConnectionFactory factory, string queue, RabbitMqSettings settings, RunState state, CancellationToken cancellationToken)
        {
            var connection = await factory.CreateConnectionAsync("farm-perf-consumer", cancellationToken).ConfigureAwait(false);
            var channel = await connection.CreateChannelAsync(cancellationToken: cancellationToken).ConfigureAwait(false);
            await channel.BasicQosAsync(0, (ushort)settings.Prefetch, global: false, cancellationToken).ConfigureAwait(false);
            var consumer = new Consumer(connection, channel, settings.AckEvery, state);
            var handler = new AsyncEventingBasicConsumer(channel);
            handler.ReceivedAsync += consumer.OnDeliveryAsync;
            consumer._consumerTag = await channel.BasicConsumeAsync(queue, autoAck: false, handler, cancellationToken).ConfigureAwait(false);
            return consumer;
        }

        private async Task OnDeliveryAsync(object sender, BasicDeliverEventArgs delivery)
        {
            var headers = delivery.BasicProperties.Headers;
            var sentAt = headers is not null && headers.TryGetValue(SentAtHeader, out var value) && value is long stamp ? stamp : (long?)null;
            _state.OnDelivered(delivery.BasicProperties.MessageId, sentAt);
            _lastTag = delivery.DeliveryTag;
            if (++_unacked >= _ackEvery)
            {
                await AckUpToAsync(_lastTag, CancellationToken.None).ConfigureAwait(false);
            }
        }

        private async Task AckUpToAsync(ulong tag, CancellationToken cancellationToken)
        {
            _unacked = 0;
            _lastAcked = tag;
            try
            {
                await _channel.BasicAckAsync(tag, multiple: true, cancellationToken).ConfigureAwait(false);
            }
            catch (Exception e) when (e is RabbitMQ.Client.Exceptions.OperationInterruptedException or RabbitMQ.Client.Exceptions.AlreadyClosedException or IOException)
            {
                _state.OnSettleError(e);
            }
        }

        /// <summary>After the drain: no more deliveries; ack what is left so nothing goes back to the queue.</summary>
        public async Task StopAsync(CancellationToken cancellationToken)
        {
            await _channel.BasicCancelAsync(_consumerTag, noWait: false, cancellationToken).ConfigureAwait(false);
            if (_lastTag > _lastAcked)
            {
                await AckUpToAsync(_lastTag, cancellationToken).ConfigureAwait(false);
            }
        }

        public async ValueTask DisposeAsync()
        {
            await _channel.DisposeAsync().ConfigureAwait(false);
            await _connection.DisposeAsync().ConfigureAwait(false);
        }
    }
}
