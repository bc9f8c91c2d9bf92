using System.Globalization;
using System.Text;

namespace Farm.Broker.Node;

/// <summary>
/// A node process's claim on its id, as the operating system keeps it: an exclusive lock on
/// <c>DATA/nodes/node-N.lock</c>, held for the life of the process, with the process id written
/// in it. The kernel drops the lock the moment the process dies (SIGKILL included), so the other
/// nodes of a SQLite farm (one machine, one data directory) can tell a crash at once instead of
/// waiting for its heartbeats to lapse. A frozen or cut-off process still holds its lock: for those
/// the heartbeat timeout stays the rule.
/// </summary>
public sealed class NodeProcessLock : IDisposable
{
    private readonly FileStream _file;

    private NodeProcessLock(FileStream file) => _file = file;

    public static string PathOf(string dataDirectory, long nodeId) =>
        Path.Combine(dataDirectory, "nodes", string.Create(CultureInfo.InvariantCulture, $"node-{nodeId}.lock"));

    /// <summary>Takes the lock for this process (writing its id in it), or null while another process holds it.</summary>
    public static NodeProcessLock? TryAcquire(string dataDirectory, long nodeId, int processId)
    {
        var path = PathOf(dataDirectory, nodeId);
        Directory.CreateDirectory(Path.GetDirectoryName(path)!);
        var file = TryOpenExclusive(path, FileMode.OpenOrCreate);
        if (file is null)
        {
            return null;
        }
        file.SetLength(0);
        file.Write(Encoding.ASCII.GetBytes(processId.ToString(CultureInfo.InvariantCulture)));
        file.Flush();
        return new NodeProcessLock(file);
    }

    /// <summary>
    /// When the process registered as node <paramref name="nodeId"/> (<paramref name="registeredProcessId"/>)
    /// is gone: the lock it held is free and still names it. The lock is then held by the caller until
    /// it disposes the result, so a new process of that node cannot start taking containers while the
    /// caller releases the dead one's. Null when the lock is held (the process lives, or is frozen),
    /// names another process (the one registered never took it), or does not exist.
    /// </summary>
    public static IDisposable? TryHoldIfGone(string dataDirectory, long nodeId, int registeredProcessId)
    {
        var path = PathOf(dataDirectory, nodeId);
        if (registeredProcessId <= 0 || !File.Exists(path))
        {
            return null;
        }
        var file = TryOpenExclusive(path, FileMode.Open);
        if (file is null)
        {
            return null;
        }
        using var reader = new StreamReader(file, Encoding.ASCII, detectEncodingFromByteOrderMarks: false, leaveOpen: true);
        var written = reader.ReadToEnd().Trim();
        if (int.TryParse(written, NumberStyles.None, CultureInfo.InvariantCulture, out var lastHolder) && lastHolder == registeredProcessId)
        {
            return file;
        }
        file.Dispose();
        return null;
    }

    /// <summary>Whether the registered process is gone (<see cref="TryHoldIfGone"/>), without keeping the lock.</summary>
    public static bool IsGone(string dataDirectory, long nodeId, int registeredProcessId)
    {
        using var held = TryHoldIfGone(dataDirectory, nodeId, registeredProcessId);
        return held is not null;
    }

    private static FileStream? TryOpenExclusive(string path, FileMode mode)
    {
        try
        {
            // FileShare.None is an exclusive advisory lock (flock) on Unix: refused while another
            // process holds it, free as soon as that process is gone.
            return new FileStream(path, mode, FileAccess.ReadWrite, FileShare.None);
        }
        catch (IOException)
        {
            return null;
        }
        catch (UnauthorizedAccessException)
        {
            return null;
        }
    }

    public void Dispose() => _file.Dispose();
}
