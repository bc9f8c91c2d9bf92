using System.Runtime.InteropServices;
using Microsoft.Win32.SafeHandles;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// Makes a container's committed transactions durable. Its write connection commits with
/// synchronous = NORMAL: SQLite appends the transaction's frames to the WAL file and returns without
/// an fsync. This fsyncs the WAL file: at once (<see cref="Flush"/>), or on a thread of its own
/// (<see cref="FlushAsync"/>) so the group commit can write its next transaction while the disk
/// writes this one; every commit that asks while an fsync runs shares the next one.
/// <para>
/// On Linux the flush is an fdatasync, as SQLite's own syncs are: it writes the file's data and the
/// metadata needed to read it back (its size, when a commit grew the WAL) and skips the rest (the
/// modification time), which an fsync on ext4 writes as one more synchronous I/O per commit.
/// </para>
/// </summary>
/// <remarks>
/// An fsync of the WAL file covers every frame written before it started, whichever handle wrote
/// them. SQLite fsyncs the WAL itself before each checkpoint copies it into the database file (and
/// the database file after), so a checkpoint never outruns this. The WAL file is the same file for
/// as long as the write connection is open (SQLite deletes it only when its last connection closes),
/// and a flusher lives no longer than its write connection.
/// </remarks>
internal sealed class WalFlusher : IDisposable
{
    private readonly string _walPath;
    private readonly Lock _gate = new();
    private SafeFileHandle? _wal;

    // The flush the next caller of FlushAsync waits for: it starts after that caller's commit.
    private TaskCompletionSource? _next;
    private Task _running = Task.CompletedTask;
    // Set while FlushWaiting runs (it clears it under the lock when nothing waits): whoever finds it
    // clear starts it again. The task itself may still look unfinished after it cleared this.
    private bool _flushing;
    private bool _disposed;

    public WalFlusher(string databasePath) => _walPath = databasePath + "-wal";

    /// <summary>Makes every commit so far durable before returning.</summary>
    public void Flush()
    {
        SafeFileHandle wal;
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            wal = OpenLocked();
        }
        FlushData(wal, _walPath);
    }

    /// <summary>
    /// Completes once every commit so far is durable; fails (an <see cref="IOException"/>) when the
    /// fsync did, after which nothing written since may be assumed durable either.
    /// </summary>
    public Task FlushAsync()
    {
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            if (_next is { } waiting)
            {
                return waiting.Task;
            }
            var next = _next = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            if (!_flushing)
            {
                _flushing = true;
                _running = Task.Run(FlushWaiting);
            }
            return next.Task;
        }
    }

    /// <summary>Runs one fsync for everything that asked while the previous one ran, until nothing waits.</summary>
    private void FlushWaiting()
    {
        while (true)
        {
            TaskCompletionSource flush;
            SafeFileHandle wal;
            lock (_gate)
            {
                if (_next is null)
                {
                    _flushing = false;
                    return;
                }
                flush = _next;
                // Whoever asks from now on waits for the next fsync: this one may have started before their commit.
                _next = null;
                try
                {
                    wal = OpenLocked();
                }
                catch (Exception e)
                {
                    flush.SetException(e);
                    continue;
                }
            }
            try
            {
                FlushData(wal, _walPath);
                flush.SetResult();
            }
            catch (Exception e)
            {
                flush.SetException(e);
            }
        }
    }

    /// <summary>fdatasync on Linux (retried when a signal interrupts it), the platform's full flush elsewhere.</summary>
    internal static void FlushData(SafeFileHandle file, string path)
    {
        if (!OperatingSystem.IsLinux())
        {
            RandomAccess.FlushToDisk(file);
            return;
        }
        var added = false;
        file.DangerousAddRef(ref added);
        try
        {
            var fd = (int)file.DangerousGetHandle();
            while (FdataSync(fd) != 0)
            {
                var errno = Marshal.GetLastPInvokeError();
                if (errno != EINTR)
                {
                    throw new IOException($"fdatasync of '{path}' failed: {Marshal.GetPInvokeErrorMessage(errno)} (errno {errno})", errno);
                }
            }
        }
        finally
        {
            if (added)
            {
                file.DangerousRelease();
            }
        }
    }

    private const int EINTR = 4;

    // .NET's RandomAccess.FlushToDisk is an fsync; it has no data-only flush.
    [DllImport("libc", EntryPoint = "fdatasync", SetLastError = true)]
    private static extern int FdataSync(int fd);

    private SafeFileHandle OpenLocked() =>
        // Read access is enough for fsync; sharing everything, so SQLite's own handles are unaffected.
        _wal ??= File.OpenHandle(_walPath, FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete);

    /// <summary>Waits for the flush under way (callers that asked before get their answer), then closes the WAL handle.</summary>
    public void Dispose()
    {
        Task running;
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }
            _disposed = true;
            running = _running;
        }
        try
        {
            running.GetAwaiter().GetResult();
        }
        finally
        {
            lock (_gate)
            {
                _next?.TrySetException(new ObjectDisposedException(nameof(WalFlusher), "The container database was closed before this commit was flushed to disk."));
                _next = null;
                _wal?.Dispose();
                _wal = null;
            }
        }
    }
}
