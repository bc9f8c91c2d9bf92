using System.Globalization;

namespace Farm.Cli.Hosting;

/// <summary>
/// The layout of a local farm's data directory:
/// <code>
/// &lt;data&gt;/farm.json            what 'farm up' started (connection string, node pids); read by every command
/// &lt;data&gt;/logs/node-N.log      stdout + stderr of a detached node
/// &lt;data&gt;/farm.lock            held while 'farm up', 'farm down' or 'farm node' changes the farm
/// </code>
/// Everything else under it (the databases) belongs to the nodes.
/// </summary>
public sealed class FarmDataDirectory(string root)
{
    public string Root { get; } = Path.GetFullPath(root);

    public string FarmFile => Path.Combine(Root, "farm.json");

    public string LockFile => Path.Combine(Root, "farm.lock");

    public string LogsDirectory => Path.Combine(Root, "logs");

    public string LogFile(int nodeId) => Path.Combine(LogsDirectory, string.Create(CultureInfo.InvariantCulture, $"node-{nodeId}.log"));

    /// <summary>
    /// Takes the directory's lock so two commands that change the farm ('farm up', 'farm down',
    /// 'farm node ...') on the same data cannot interleave. .NET maps FileShare.None to an advisory
    /// flock on Unix; the lock goes with the process.
    /// </summary>
    public FileStream AcquireLock()
        => TryAcquireLock() ?? throw LockHeld();

    /// <summary>The lock, waiting up to <paramref name="wait"/> while another command holds it.</summary>
    public async Task<FileStream> AcquireLockAsync(TimeSpan wait, CancellationToken cancellationToken)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (true)
        {
            if (TryAcquireLock() is { } held)
            {
                return held;
            }

            if (clock.Elapsed >= wait)
            {
                throw LockHeld();
            }

            await Task.Delay(TimeSpan.FromMilliseconds(100), cancellationToken);
        }
    }

    private FileStream? TryAcquireLock()
    {
        Directory.CreateDirectory(Root);
        try
        {
            return new FileStream(LockFile, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None);
        }
        catch (IOException)
        {
            return null;
        }
    }

    private CliException LockHeld()
        => new(ExitCodes.Error, $"Another farm command (up, down or node) is changing the farm on {Root}; wait for it to finish.");
}
