using Farm.ContainerStore.Sqlite;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Tests.Sqlite;

/// <summary>
/// The fsync of a container's WAL that acknowledgements wait for (<see cref="WalFlusher"/>), on a
/// real SQLite file in WAL mode.
/// </summary>
public sealed class WalFlusherTests : IDisposable
{
    private readonly SqliteTestDirectory _directory = new();

    public void Dispose() => _directory.Dispose();

    /// <summary>A database in WAL mode with a committed write, so its WAL file exists; kept open so it stays.</summary>
    private SqliteConnection OpenWithWal(string path)
    {
        var connection = new SqliteConnection($"Data Source={path}");
        connection.Open();
        using var command = connection.CreateCommand();
        command.CommandText = "PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);";
        command.ExecuteNonQuery();
        Assert.True(File.Exists(path + "-wal"));
        return connection;
    }

    /// <summary>
    /// Callers asking from several threads at once, thousands of times: every one gets an answer.
    /// A flusher that lost a request made just as its loop stopped once left sends unanswered.
    /// </summary>
    [Fact]
    public async Task ManyCallersAtOnce_EachGetsAFlush()
    {
        var path = _directory.File("flush.db");
        using var connection = OpenWithWal(path);
        using var flusher = new WalFlusher(path);

        var callers = Enumerable.Range(0, 4).Select(_ => Task.Run(async () =>
        {
            for (var i = 0; i < 10_000; i++)
            {
                await flusher.FlushAsync().WaitAsync(TimeSpan.FromSeconds(30));
            }
        }));

        await Task.WhenAll(callers);
        flusher.Flush();
    }

    [Fact]
    public async Task AFlush_WhenThereIsNoWalFile_Fails()
    {
        var path = _directory.File("none.db");
        using var flusher = new WalFlusher(path);

        await Assert.ThrowsAsync<FileNotFoundException>(() => flusher.FlushAsync());
        Assert.Throws<FileNotFoundException>(flusher.Flush);
    }

    [Fact]
    public async Task Disposing_AnswersTheFlushUnderWay_AndRefusesLaterOnes()
    {
        var path = _directory.File("dispose.db");
        using var connection = OpenWithWal(path);
        var flusher = new WalFlusher(path);
        var asked = flusher.FlushAsync();

        flusher.Dispose();

        await asked.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Throws<ObjectDisposedException>(() => { _ = flusher.FlushAsync(); });
    }

    /// <summary>
    /// The data-only flush reports what the kernel refused as an IOException carrying its errno
    /// (here EBADF, 9: a descriptor nothing has open), instead of returning as if the data were durable.
    /// </summary>
    [Fact]
    public void FlushData_OfADescriptorTheKernelRefuses_FailsWithItsError()
    {
        using var notOpen = new Microsoft.Win32.SafeHandles.SafeFileHandle(1_000_000, ownsHandle: false);

        var failure = Assert.ThrowsAny<IOException>(() => WalFlusher.FlushData(notOpen, "not-open-wal"));

        Assert.Contains("not-open-wal", failure.Message, StringComparison.Ordinal);
        if (OperatingSystem.IsLinux())
        {
            Assert.Equal(9, failure.HResult);
        }
    }

    [Fact]
    public void FlushData_OfAWrittenFile_Returns()
    {
        var path = _directory.File("data.bin");
        using var file = File.OpenHandle(path, FileMode.Create, FileAccess.ReadWrite);
        RandomAccess.Write(file, new byte[4096], 0);

        WalFlusher.FlushData(file, path);

        Assert.Equal(4096, RandomAccess.GetLength(file));
    }
}
