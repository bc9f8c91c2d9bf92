using Farm.Broker.Node;

namespace Farm.Broker.Tests;

/// <summary>The process lock on real files: held while its holder lives, telling a gone process by the id it wrote.</summary>
public sealed class NodeProcessLockTests : IDisposable
{
    private readonly string _data = Directory.CreateTempSubdirectory("farm-lock-").FullName;

    public void Dispose() => Directory.Delete(_data, recursive: true);

    [Fact]
    public void WhileItsHolderHoldsIt_NoOneElseTakesIt_OrTakesTheNodeForGone()
    {
        using var held = NodeProcessLock.TryAcquire(_data, 2, processId: 4242);
        Assert.NotNull(held);

        Assert.Null(NodeProcessLock.TryAcquire(_data, 2, processId: 5151));
        Assert.Null(NodeProcessLock.TryHoldIfGone(_data, 2, registeredProcessId: 4242));
    }

    [Fact]
    public void OnceItsHolderIsGone_TheNodeRegisteredWithThatProcessIsGone_AndStaysHeldByTheCaller()
    {
        NodeProcessLock.TryAcquire(_data, 2, processId: 4242)!.Dispose();

        using var gone = NodeProcessLock.TryHoldIfGone(_data, 2, registeredProcessId: 4242);
        Assert.NotNull(gone);
        // A new process of that node waits until the caller has released the dead one's containers.
        Assert.Null(NodeProcessLock.TryAcquire(_data, 2, processId: 6363));
        gone.Dispose();
        using var next = NodeProcessLock.TryAcquire(_data, 2, processId: 6363);
        Assert.NotNull(next);
    }

    [Fact]
    public void AFreeLockNamingAnotherProcess_SaysNothingOfTheRegisteredOne()
    {
        // The registered process never took the lock (an earlier, frozen life of the node held it).
        NodeProcessLock.TryAcquire(_data, 2, processId: 4242)!.Dispose();

        Assert.Null(NodeProcessLock.TryHoldIfGone(_data, 2, registeredProcessId: 7777));
        Assert.Null(NodeProcessLock.TryHoldIfGone(_data, 3, registeredProcessId: 4242));
        Assert.Null(NodeProcessLock.TryHoldIfGone(_data, 2, registeredProcessId: 0));
    }
}
