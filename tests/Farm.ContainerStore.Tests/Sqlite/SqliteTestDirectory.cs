namespace Farm.ContainerStore.Tests.Sqlite;

/// <summary>A fresh directory per test for real SQLite files, deleted afterwards.</summary>
public sealed class SqliteTestDirectory : IDisposable
{
    public SqliteTestDirectory() =>
        Path = Directory.CreateDirectory(System.IO.Path.Combine(System.IO.Path.GetTempPath(), "farm-store-tests", Guid.NewGuid().ToString("N"))).FullName;

    public string Path { get; }

    public string File(string name) => System.IO.Path.Combine(Path, name);

    public string ConnectionString(string name) => $"Data Source={File(name)}";

    public void Dispose()
    {
        if (Directory.Exists(Path))
        {
            Directory.Delete(Path, recursive: true);
        }
    }
}
