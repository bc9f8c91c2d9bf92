using Farm.Contracts;

namespace Farm.Contracts.Tests;

/// <summary>
/// The frame batcher puts every producer's frames on the stream exactly once, in each producer's
/// order; a producer's write returns once its frame is out even while others keep the stream busy;
/// and a failed write fails the frames waiting behind it.
/// </summary>
public sealed class FrameBatcherTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    [Fact]
    public async Task ConcurrentProducers_EachFrameIsWrittenOnce_InEachProducersOrder()
    {
        var written = new List<(int Producer, int Index)>();
        var writes = 0;
        var batcher = new FrameBatcher<(int Producer, int Index)>(async batch =>
        {
            Interlocked.Increment(ref writes);
            await Task.Yield();
            lock (written)
            {
                written.AddRange(batch);
            }
        }, _ => 1, maxBatchBytes: 64);

        const int producers = 16, frames = 200;
        await Task.WhenAll(Enumerable.Range(0, producers).Select(p => Task.Run(async () =>
        {
            for (var i = 0; i < frames; i++)
            {
                await batcher.WriteAsync((p, i));
            }
        }))).WaitAsync(Patience);
        await batcher.FlushAsync();

        Assert.Equal(producers * frames, written.Count);
        foreach (var group in written.GroupBy(f => f.Producer))
        {
            Assert.Equal(Enumerable.Range(0, frames), group.Select(f => f.Index));
        }
        // Frames that queued together went in one write.
        Assert.True(writes < producers * frames, $"{writes} writes for {producers * frames} frames");
    }

    [Fact]
    public async Task AProducersWrite_ReturnsOnceItsFrameIsOut_WhileOthersKeepTheStreamBusy()
    {
        var mineWriting = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var mineMayFinish = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var heldMayFinish = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var batcher = new FrameBatcher<string>(async batch =>
        {
            if (batch.Contains("mine"))
            {
                mineWriting.SetResult();
                await mineMayFinish.Task;
            }
            if (batch.Contains("held"))
            {
                await heldMayFinish.Task;
            }
        }, _ => 1, maxBatchBytes: 1);

        // The producer of "mine" is the writer; "held" queues behind it while "mine" is on its way.
        var mine = batcher.WriteAsync("mine");
        await mineWriting.Task.WaitAsync(Patience);
        Assert.True(batcher.Post("held"));
        mineMayFinish.SetResult();

        // "held" is stuck (its write never finishes yet): the producer of "mine" is not kept writing it.
        await mine.WaitAsync(TimeSpan.FromSeconds(5));
        heldMayFinish.SetResult();
        await batcher.FlushAsync().WaitAsync(Patience);
    }

    [Fact]
    public async Task AFailedWrite_FailsItsFrames_AndEveryLaterOne()
    {
        var batcher = new FrameBatcher<int>(_ => Task.FromException(new IOException("gone")), _ => 1, maxBatchBytes: 10);

        await Assert.ThrowsAsync<IOException>(() => batcher.WriteAsync(1).WaitAsync(Patience));
        await Assert.ThrowsAsync<IOException>(() => batcher.WriteAsync(2).WaitAsync(Patience));
        Assert.False(batcher.Post(3));
        Assert.IsType<IOException>(batcher.Failure);
    }
}
