using Farm.Broker.Containers;
using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

/// <summary>
/// Changes that must commit in the same transaction as a send: the completions of a send that
/// completes what it forwards (<see cref="QueueEntity.PrepareCompletions"/>). The send takes them
/// into its commit (<see cref="TryTake"/>), whose outcome then settles them; a send that ends
/// without a commit of its own either commits them alone (it stored nothing new: every message was
/// a duplicate) or gives them back (it failed before committing).
/// </summary>
internal sealed class CommitsWithSend(CommitQueue commits, Action<ContainerWriteBatch> write, Action onCommitted, Action<Exception> onFailed, Action giveBack)
{
    private int _taken;

    /// <summary>The container the changes belong to: a send can only take them into a commit of the same one.</summary>
    public CommitQueue Commits { get; } = commits;

    /// <summary>True once, for the commit that writes them; false once anything else took them.</summary>
    public bool TryTake() => Interlocked.Exchange(ref _taken, 1) == 0;

    public void Write(ContainerWriteBatch batch) => write(batch);

    public void OnCommitted() => onCommitted();

    public void OnFailed(Exception error) => onFailed(error);

    /// <summary>After a send that stored nothing: the changes commit on their own.</summary>
    public Task CommitAloneAsync() =>
        TryTake() ? Commits.CommitAsync(write, onCommitted, onFailed) : Task.CompletedTask;

    /// <summary>After a send that failed before committing: nothing was written, the locks are the caller's again.</summary>
    public void GiveBack()
    {
        if (TryTake())
        {
            giveBack();
        }
    }
}
