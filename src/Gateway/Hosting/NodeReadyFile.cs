using System.Text.Json;

namespace Farm.Gateway.Hosting;

/// <summary>
/// DATA/nodes/node-N.json, written once the node serves: how the `farm` CLI learns that a node is
/// up, its process id and its address (the port may have been picked by the OS).
/// </summary>
internal static class NodeReadyFile
{
    public static string PathFor(string dataDirectory, long nodeId) => Path.Combine(dataDirectory, "nodes", $"node-{nodeId}.json");

    public static void Write(string dataDirectory, long nodeId, string address)
    {
        var path = PathFor(dataDirectory, nodeId);
        Directory.CreateDirectory(Path.GetDirectoryName(path)!);
        var json = JsonSerializer.Serialize(new
        {
            nodeId,
            pid = Environment.ProcessId,
            address,
            startedAt = DateTimeOffset.UtcNow,
        });
        // Write then rename, so a reader never sees half a file.
        var temporary = path + ".tmp";
        File.WriteAllText(temporary, json);
        File.Move(temporary, path, overwrite: true);
    }

    public static void Delete(string dataDirectory, long nodeId)
    {
        var path = PathFor(dataDirectory, nodeId);
        if (File.Exists(path))
        {
            File.Delete(path);
        }
    }
}
