using System.Diagnostics;

namespace Farm.Broker.Overload;

/// <summary>
/// How far behind its work this process is: how long a work item queued on the thread pool now
/// waits before it runs. Every request a node serves (a socket read, a gRPC handler, a commit's
/// continuation) passes through that queue, so its wait is the delay every caller sees on top of
/// the work itself. A thread of its own (the pool's own timers would wait in the same queue) queues
/// a tiny sample item every <see cref="SampleEvery"/> and notes when it starts. One per process: the
/// pool is the process's.
/// </summary>
public sealed class ThreadPoolLag
{
    public static readonly TimeSpan SampleEvery = TimeSpan.FromMilliseconds(100);

    /// <summary>Samples waiting at most: a pool stalled for long holds this many, not one per tick.</summary>
    private const int MaxWaiting = 64;

    private static readonly Lazy<ThreadPoolLag> SharedLag = new(() => new ThreadPoolLag(), LazyThreadSafetyMode.ExecutionAndPublication);

    // When each waiting sample was queued (Stopwatch timestamps), by sample number modulo MaxWaiting.
    private readonly long[] _queuedAt = new long[MaxWaiting];
    private readonly Action<long> _onSampleRan;
    private long _queued;
    private long _ran;
    private long _lastWaitTicks;

    private ThreadPoolLag()
    {
        _onSampleRan = OnSampleRan;
        var thread = new Thread(SampleLoop) { IsBackground = true, Name = "Farm thread-pool lag" };
        thread.Start();
    }

    /// <summary>The sampler of this process, started on first use.</summary>
    public static ThreadPoolLag Shared => SharedLag.Value;

    /// <summary>
    /// The pool's wait now: the larger of the last sample's wait and the age of the oldest sample not
    /// yet run (a pool falling further behind shows at once, not only when that sample comes out).
    /// </summary>
    public TimeSpan Current
    {
        get
        {
            var last = Interlocked.Read(ref _lastWaitTicks);
            var ran = Interlocked.Read(ref _ran);
            if (Interlocked.Read(ref _queued) > ran)
            {
                var oldest = Volatile.Read(ref _queuedAt[ran % MaxWaiting]);
                last = Math.Max(last, Stopwatch.GetTimestamp() - oldest);
            }
            return Stopwatch.GetElapsedTime(0, last);
        }
    }

    private void SampleLoop()
    {
        var number = 0L;
        while (true)
        {
            if (number - Interlocked.Read(ref _ran) < MaxWaiting)
            {
                Volatile.Write(ref _queuedAt[number % MaxWaiting], Stopwatch.GetTimestamp());
                Interlocked.Exchange(ref _queued, number + 1);
                // The global queue, as socket completions and Task.Run go: not this thread's local one (it has none).
                ThreadPool.UnsafeQueueUserWorkItem(_onSampleRan, number, preferLocal: false);
                number++;
            }
            Thread.Sleep(SampleEvery);
        }
    }

    private void OnSampleRan(long number)
    {
        var wait = Stopwatch.GetTimestamp() - Volatile.Read(ref _queuedAt[number % MaxWaiting]);
        Interlocked.Exchange(ref _lastWaitTicks, wait);
        // Samples may run out of order (several pool threads); the count moves only forward.
        long ran;
        while ((ran = Interlocked.Read(ref _ran)) < number + 1 && Interlocked.CompareExchange(ref _ran, number + 1, ran) != ran)
        {
        }
    }
}
