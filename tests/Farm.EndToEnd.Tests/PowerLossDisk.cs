using System.Diagnostics;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A directory whose writes are lost at a power loss unless fsynced: tests/power-loss/powerloss_fs.py
/// (a FUSE file system over a backing directory; Debian's python3-fusepy and libfuse2, which test.sh
/// installs) mounted at <see cref="MountPath"/>. <see cref="PowerLossAsync"/> drops every write not
/// fsynced since; <see cref="RemountAsync"/> mounts what the backing directory kept, as a disk after
/// the power came back.
/// </summary>
internal sealed class PowerLossDisk : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    private static readonly string Script = Path.Combine(TestPaths.RepositoryRoot, "tests", "power-loss", "powerloss_fs.py");

    private readonly string _root;
    private Process? _fs;
    private readonly List<string> _errors = [];

    private PowerLossDisk(string root)
    {
        _root = root;
        BackingPath = Directory.CreateDirectory(Path.Combine(root, "backing")).FullName;
        MountPath = Directory.CreateDirectory(Path.Combine(root, "mount")).FullName;
    }

    /// <summary>Where the program under test keeps its files.</summary>
    public string MountPath { get; }

    /// <summary>What the disk holds: only what was fsynced, once the power went off.</summary>
    public string BackingPath { get; }

    public static async Task<PowerLossDisk> MountAsync()
    {
        var disk = new PowerLossDisk(Directory.CreateTempSubdirectory("farm-powerloss-").FullName);
        try
        {
            await disk.StartAsync();
            return disk;
        }
        catch
        {
            await disk.DisposeAsync();
            throw;
        }
    }

    private async Task StartAsync()
    {
        var start = new ProcessStartInfo("/usr/bin/python3")
        {
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        start.ArgumentList.Add(Script);
        // A slow disk's fsync: an answer given before the fsync returned is caught far more often.
        start.ArgumentList.Add("--fsync-delay-ms");
        start.ArgumentList.Add("100");
        start.ArgumentList.Add(BackingPath);
        start.ArgumentList.Add(MountPath);
        _fs = Process.Start(start) ?? throw new InvalidOperationException("Could not start powerloss_fs.py.");
        _fs.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                lock (_errors)
                {
                    _errors.Add(e.Data);
                }
            }
        };
        _fs.BeginErrorReadLine();
        var ready = await ReadLineAsync();
        Assert.True(ready == "ready", $"powerloss_fs.py did not mount {MountPath} (said '{ready}'): {Errors}");
    }

    /// <summary>The power goes off: every write not fsynced is dropped. Returns the bytes dropped in all, and in WAL files.</summary>
    public async Task<(long Dropped, long DroppedFromWal)> PowerLossAsync()
    {
        await _fs!.StandardInput.WriteLineAsync("powerloss");
        await _fs.StandardInput.FlushAsync();
        var answer = await ReadLineAsync();
        // "dropped N bytes in F files (WAL: W bytes)"
        var words = answer?.Split(' ') ?? [];
        Assert.True(words is ["dropped", _, "bytes", "in", _, "files", "(WAL:", _, "bytes)"], $"powerloss_fs.py answered '{answer}': {Errors}");
        return (long.Parse(words[1]), long.Parse(words[7]));
    }

    /// <summary>Unmounts and mounts the backing directory again, with nothing unsynced.</summary>
    public async Task RemountAsync()
    {
        await UnmountAsync();
        await StartAsync();
    }

    private async Task UnmountAsync()
    {
        if (_fs is null)
        {
            return;
        }
        var result = await ProcessRunner.RunAsync("umount", [MountPath], Deadline);
        if (result.ExitCode != 0)
        {
            // Busy (a process still holds a file): detach it; it goes once the last user lets go.
            await ProcessRunner.RunAsync("umount", ["-l", MountPath], Deadline);
        }
        using var deadline = new CancellationTokenSource(Deadline);
        try
        {
            await _fs.WaitForExitAsync(deadline.Token);
        }
        catch (OperationCanceledException)
        {
            _fs.Kill();
        }
        _fs.Dispose();
        _fs = null;
    }

    private async Task<string?> ReadLineAsync()
    {
        using var deadline = new CancellationTokenSource(Deadline);
        try
        {
            return await _fs!.StandardOutput.ReadLineAsync(deadline.Token);
        }
        catch (OperationCanceledException)
        {
            return null;
        }
    }

    private string Errors
    {
        get
        {
            lock (_errors)
            {
                return string.Join(Environment.NewLine, _errors);
            }
        }
    }

    public async ValueTask DisposeAsync()
    {
        await UnmountAsync();
        try
        {
            Directory.Delete(_root, recursive: true);
        }
        catch (IOException)
        {
            // Left behind in the temp directory.
        }
    }
}
