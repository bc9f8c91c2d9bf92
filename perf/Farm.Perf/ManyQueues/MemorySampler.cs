using System.Diagnostics;

namespace Farm.Perf.ManyQueues;

/// <summary>
/// Samples the nodes' RSS (VmRSS) every second in the background, each sample labelled with the
/// phase of the run it fell in, for the per-phase figures and the RSS-over-time chart.
/// </summary>
internal sealed class MemorySampler : IDisposable
{
    private static readonly TimeSpan Every = TimeSpan.FromSeconds(1);

    private IReadOnlyList<int> _pids;
    private readonly Stopwatch _clock;
    private readonly List<(double At, string Phase, double?[] Rss)> _samples = [];
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _loop;
    private string _phase = "start";

    public MemorySampler(IReadOnlyList<int> pids, Stopwatch clock)
    {
        _pids = pids;
        _clock = clock;
        _loop = Task.Run(LoopAsync);
    }

    /// <summary>From now on samples belong to <paramref name="phase"/>; takes one at once.</summary>
    public void Mark(string phase)
    {
        lock (_samples)
        {
            _phase = phase;
        }

        Sample();
    }

    /// <summary>The nodes were started again (same order, new processes): sample those from now on.</summary>
    public void Follow(IReadOnlyList<int> pids)
    {
        lock (_samples)
        {
            _pids = pids;
        }
    }

    /// <summary>Each node's RSS now, in MiB.</summary>
    public double?[] Current() => [.. _pids.Select(ProcessMemory.RssMib)];

    /// <summary>Each node's mean and largest RSS over the samples of <paramref name="phase"/>.</summary>
    public (double?[] Mean, double?[] Max) WindowStats(string phase)
    {
        lock (_samples)
        {
            var inPhase = _samples.Where(s => s.Phase == phase).ToList();
            var mean = new double?[_pids.Count];
            var max = new double?[_pids.Count];
            for (var i = 0; i < _pids.Count; i++)
            {
                var values = inPhase.Select(s => s.Rss[i]).OfType<double>().ToList();
                mean[i] = values.Count == 0 ? null : Math.Round(values.Average(), 1);
                max[i] = values.Count == 0 ? null : values.Max();
            }

            return (mean, max);
        }
    }

    /// <summary>RSS (MiB) against seconds since the run started, a series per node.</summary>
    public ResultChart Chart(string title)
    {
        lock (_samples)
        {
            var series = _pids.Select((_, i) => new ResultChartSeries(
                _pids.Count == 1 ? "node RSS" : $"node {i + 1} RSS",
                [.. _samples.Where(s => s.Rss[i] is not null).Select(s => new[] { Math.Round(s.At, 1), s.Rss[i]!.Value })])).ToList();
            var phases = string.Join(", ", _samples.GroupBy(s => s.Phase).Select(g => $"{g.Key} from {g.First().At:0} s"));
            return new ResultChart("many-queues-rss.png", $"{title} ({phases})", "seconds since start", "RSS (MiB)", false, false, series);
        }
    }

    public void Dispose()
    {
        _stop.Cancel();
        try
        {
            _loop.Wait(TimeSpan.FromSeconds(5));
        }
        catch (AggregateException)
        {
            // Cancelled.
        }

        _stop.Dispose();
    }

    private void Sample()
    {
        var rss = Current();
        lock (_samples)
        {
            _samples.Add((_clock.Elapsed.TotalSeconds, _phase, rss));
        }
    }

    private async Task LoopAsync()
    {
        using var timer = new PeriodicTimer(Every);
        try
        {
            while (await timer.WaitForNextTickAsync(_stop.Token).ConfigureAwait(false))
            {
                Sample();
            }
        }
        catch (OperationCanceledException)
        {
            // Stopped.
        }
    }
}
