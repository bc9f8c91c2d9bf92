using System.Runtime.Versioning;
using Farm.Cli.Hosting;

namespace Farm.Cli.Tests;

/// <summary>farm.json: written whole (a temp file renamed over it), and the owner's alone when it holds the farm database's connection.</summary>
public sealed class FarmStateFileTests : IDisposable
{
    private readonly string _root = Directory.CreateTempSubdirectory("farm-state-").FullName;

    public void Dispose() => Directory.Delete(_root, recursive: true);

    private static FarmStateRecord Record(string? farmConnection) => new()
    {
        ConnectionString = "Endpoint=http://127.0.0.1:5480",
        State = FarmState.Running,
        Nodes = [new FarmNodeEntry(1, 42, "http://127.0.0.1:5480")],
        Store = farmConnection is null ? "sqlite" : "postgres",
        FarmConnection = farmConnection,
    };

    [Fact]
    [UnsupportedOSPlatform("windows")]
    public void ARecordWithTheFarmDatabasesConnection_IsTheOwnersAlone_EvenOverATempFileLeftReadableByAll()
    {
        var data = new FarmDataDirectory(_root);
        // A temp file an earlier run left behind, readable by everyone.
        File.WriteAllText(data.FarmFile + ".tmp", "left over");
        File.SetUnixFileMode(data.FarmFile + ".tmp", (UnixFileMode)0b110_100_100);

        FarmStateFile.Write(data, Record("Host=db;Username=farm;Password=secret"));

        Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(data.FarmFile));
        Assert.False(File.Exists(data.FarmFile + ".tmp"));
        Assert.Equal("Host=db;Username=farm;Password=secret", FarmStateFile.Read(data).FarmConnection);
    }

    [Fact]
    public void WritingAgain_ReplacesTheRecordWhole()
    {
        var data = new FarmDataDirectory(_root);
        FarmStateFile.Write(data, Record(null));
        FarmStateFile.Write(data, Record(null) with { State = FarmState.Stopped, Nodes = [new FarmNodeEntry(1, null, "http://127.0.0.1:5480")] });

        var read = FarmStateFile.Read(data);
        Assert.Equal(FarmState.Stopped, read.State);
        Assert.Null(Assert.Single(read.Nodes).Pid);
        Assert.Equal(["farm.json"], Directory.GetFiles(_root).Select(Path.GetFileName));
    }
}
