using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A private network for a partition test: one network namespace per node, each joined by a veth
/// pair to a bridge on the host. The host side holds 10.a.b.1/24 (where the test's PostgreSQL
/// listens), node N is 10.a.b.(10+N); a.b come from the test's pid so concurrent or crashed runs
/// never share names or addresses. A bridge rather than routing through the host: nodes reach each
/// other without turning on the host's ip_forward, and no packet for a cut node can leak out through
/// the host's default route. <see cref="CutAsync"/> takes the host end of a node's veth down: the
/// node is still up inside its namespace but every packet to or from it is dropped, as when its
/// cable is pulled. Disposing deletes everything this run created, also after a failure.
/// </summary>
internal sealed partial class NetworkNamespaces : IAsyncDisposable
{
    private const string NamespacePrefix = "farm-p";
    private static readonly TimeSpan IpTimeout = TimeSpan.FromSeconds(20);

    private readonly List<string> _namespaces = [];
    private readonly List<string> _links = [];
    private readonly int _pid = Environment.ProcessId;

    private NetworkNamespaces(int nodes)
    {
        var a = (_pid / 256) % 256;
        var b = _pid % 256;
        Subnet = $"10.{a}.{b}";
        Nodes = nodes;
        Bridge = $"fpb{_pid}";
    }

    /// <summary>The first three octets of this run's /24.</summary>
    public string Subnet { get; }

    public int Nodes { get; }

    public string Bridge { get; }

    /// <summary>The host's address on the bridge: where the nodes find PostgreSQL.</summary>
    public string HostAddress => $"{Subnet}.1";

    public string NodeAddress(int node) => $"{Subnet}.{10 + node}";

    public string NamespaceOf(int node) => $"{NamespacePrefix}{_pid}-n{node}";

    /// <summary>The host end of node N's veth pair (a bridge port); the namespace end is <see cref="InnerLink"/>.</summary>
    public string HostLink(int node) => $"fph{_pid}n{node}";

    public string InnerLink(int node) => $"fpn{_pid}n{node}";

    /// <summary>
    /// Builds the network, or throws with a message that says what is missing (not root, no `ip`,
    /// no namespace support): a partition test must fail, not pass, where it cannot run.
    /// </summary>
    public static async Task<NetworkNamespaces> CreateAsync(int nodes, Action<string> log)
    {
        if (!OperatingSystem.IsLinux())
        {
            throw new InvalidOperationException("The partition test needs Linux network namespaces (ip netns); this is not Linux.");
        }
        if (Environment.UserName != "root" && GetEffectiveUserId() != 0)
        {
            throw new InvalidOperationException("The partition test needs root to create network namespaces and veth pairs (ip netns add); run it as root.");
        }

        var network = new NetworkNamespaces(nodes);
        try
        {
            await RemoveLeftoversAsync(log);
            await network.BuildAsync();
            return network;
        }
        catch (Exception e)
        {
            await network.DisposeAsync();
            throw new InvalidOperationException($"ip netns is unavailable here, so the partition test cannot run: {e.Message}", e);
        }
    }

    private async Task BuildAsync()
    {
        await IpAsync("link", "add", Bridge, "type", "bridge");
        _links.Add(Bridge);
        await IpAsync("addr", "add", $"{HostAddress}/24", "dev", Bridge);
        await IpAsync("link", "set", Bridge, "up");
        for (var node = 1; node <= Nodes; node++)
        {
            var ns = NamespaceOf(node);
            await IpAsync("netns", "add", ns);
            _namespaces.Add(ns);
            await IpAsync("link", "add", HostLink(node), "type", "veth", "peer", "name", InnerLink(node));
            _links.Add(HostLink(node));
            await IpAsync("link", "set", InnerLink(node), "netns", ns);
            await IpAsync("link", "set", HostLink(node), "master", Bridge);
            await IpAsync("link", "set", HostLink(node), "up");
            await IpAsync("-n", ns, "link", "set", "lo", "up");
            await IpAsync("-n", ns, "addr", "add", $"{NodeAddress(node)}/24", "dev", InnerLink(node));
            await IpAsync("-n", ns, "link", "set", InnerLink(node), "up");
        }
    }

    /// <summary>Cuts node N off: the host end of its veth goes down, so nothing reaches it or leaves it.</summary>
    public Task CutAsync(int node) => IpAsync("link", "set", HostLink(node), "down");

    /// <summary>Reconnects node N.</summary>
    public Task HealAsync(int node) => IpAsync("link", "set", HostLink(node), "up");

    /// <summary>The command line that runs a program inside node N's namespace.</summary>
    public IReadOnlyList<string> ExecPrefix(int node) => ["ip", "netns", "exec", NamespaceOf(node)];

    /// <summary>
    /// A TCP connection opened from inside node N's namespace, for a client that stands beside a
    /// cut-off node. The socket is created by a thread that joined the namespace for that moment
    /// (network namespaces are per thread; a socket keeps the one it was created in).
    /// </summary>
    public async Task<Socket> ConnectInsideAsync(int node, IPEndPoint endpoint, CancellationToken cancellationToken)
    {
        var created = new TaskCompletionSource<Socket>(TaskCreationOptions.RunContinuationsAsynchronously);
        var path = $"/run/netns/{NamespaceOf(node)}";
        var thread = new Thread(() =>
        {
            try
            {
                created.SetResult(CreateSocketIn(path));
            }
            catch (Exception e)
            {
                created.SetException(e);
            }
        }) { IsBackground = true, Name = "netns socket" };
        thread.Start();
        var socket = await created.Task;
        try
        {
            await socket.ConnectAsync(endpoint, cancellationToken);
            return socket;
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    private static Socket CreateSocketIn(string namespacePath)
    {
        var home = Open("/proc/thread-self/ns/net");
        try
        {
            var target = Open(namespacePath);
            try
            {
                Check(SetNamespace(target, CloneNewNet), $"setns({namespacePath})");
            }
            finally
            {
                _ = Close(target);
            }
            try
            {
                return new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
            }
            finally
            {
                // Back home, in case the runtime ever reuses this thread.
                Check(SetNamespace(home, CloneNewNet), "setns(back)");
            }
        }
        finally
        {
            _ = Close(home);
        }
    }

    public async ValueTask DisposeAsync()
    {
        // Deleting a namespace destroys the veth end inside it, and with it the pair.
        foreach (var ns in Enumerable.Reverse(_namespaces))
        {
            await TryIpAsync("netns", "del", ns);
        }
        foreach (var link in Enumerable.Reverse(_links))
        {
            if (await LinkExistsAsync(link))
            {
                await TryIpAsync("link", "del", link);
            }
        }
        _namespaces.Clear();
        _links.Clear();
    }

    /// <summary>
    /// Namespaces, bridges and veths left by earlier runs that died before cleaning up (their pid is
    /// gone), with any node process still running inside. Only names this class makes are touched.
    /// </summary>
    private static async Task RemoveLeftoversAsync(Action<string> log)
    {
        var namespaces = await ProcessRunner.RunAsync("ip", ["netns", "list"], IpTimeout);
        foreach (Match match in LeftoverNamespace().Matches(namespaces.Stdout))
        {
            if (IsAlive(int.Parse(match.Groups[2].Value, CultureInfo.InvariantCulture)))
            {
                continue;
            }
            var ns = match.Groups[1].Value;
            var pids = await ProcessRunner.RunAsync("ip", ["netns", "pids", ns], IpTimeout);
            foreach (var pid in pids.Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
            {
                TryKill(int.Parse(pid, CultureInfo.InvariantCulture));
            }
            await TryIpAsync("netns", "del", ns);
            log($"removed namespace {ns} left by an earlier run");
        }

        var links = await ProcessRunner.RunAsync("ip", ["-o", "link", "show"], IpTimeout);
        foreach (Match match in LeftoverLink().Matches(links.Stdout))
        {
            if (!IsAlive(int.Parse(match.Groups[2].Value, CultureInfo.InvariantCulture)))
            {
                await TryIpAsync("link", "del", match.Groups[1].Value);
                log($"removed link {match.Groups[1].Value} left by an earlier run");
            }
        }
    }

    private static bool IsAlive(int pid) => Directory.Exists($"/proc/{pid}");

    private static void TryKill(int pid)
    {
        try
        {
            using var process = Process.GetProcessById(pid);
            process.Kill();
        }
        catch (Exception e) when (e is ArgumentException or InvalidOperationException)
        {
            // Gone already.
        }
    }

    private async Task<bool> LinkExistsAsync(string link) =>
        (await ProcessRunner.RunAsync("ip", ["link", "show", link], IpTimeout)).ExitCode == 0;

    private static async Task IpAsync(params string[] arguments)
    {
        var result = await ProcessRunner.RunAsync("ip", arguments, IpTimeout);
        if (result.ExitCode != 0)
        {
            throw new InvalidOperationException($"`ip {string.Join(' ', arguments)}` failed (exit {result.ExitCode}): {result.Stderr.Trim()}");
        }
    }

    /// <summary>Cleanup goes on past a failure, so one stuck step does not leave the rest behind.</summary>
    private static async Task TryIpAsync(params string[] arguments)
    {
        try
        {
            await ProcessRunner.RunAsync("ip", arguments, IpTimeout);
        }
        catch (Exception e) when (e is TimeoutException or InvalidOperationException or System.ComponentModel.Win32Exception)
        {
            // Reported by the next run's leftover sweep if it matters.
        }
    }

    [GeneratedRegex(@"^(farm-p(\d+)-n\d+)\b", RegexOptions.Multiline)]
    private static partial Regex LeftoverNamespace();

    [GeneratedRegex(@"^\d+:\s+((?:fpb|fph)(\d+)(?:n\d+)?)[@:]", RegexOptions.Multiline)]
    private static partial Regex LeftoverLink();

    private const int CloneNewNet = 0x40000000;
    private const int OpenReadOnlyCloseOnExec = 0x80000; // O_RDONLY | O_CLOEXEC

    private static int Open(string path)
    {
        var fd = OpenFile(path, OpenReadOnlyCloseOnExec);
        Check(fd, $"open({path})");
        return fd;
    }

    private static void Check(int result, string what)
    {
        if (result < 0)
        {
            throw new IOException($"{what} failed: errno {Marshal.GetLastPInvokeError()}");
        }
    }

    private static uint GetEffectiveUserId() => GetEuid();

    [DllImport("libc", EntryPoint = "setns", SetLastError = true)]
    private static extern int SetNamespace(int fd, int nsType);

    [DllImport("libc", EntryPoint = "open", SetLastError = true)]
    private static extern int OpenFile([MarshalAs(UnmanagedType.LPStr)] string path, int flags);

    [DllImport("libc", EntryPoint = "close", SetLastError = true)]
    private static extern int Close(int fd);

    [DllImport("libc", EntryPoint = "geteuid")]
    private static extern uint GetEuid();
}
