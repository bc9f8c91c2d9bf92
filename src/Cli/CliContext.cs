using System.CommandLine;
using System.Net.Http;
using System.Net.Sockets;
using Farm.Cli.Hosting;
using Farm.Client;
using Farm.Contracts;
using Grpc.Core;

namespace Farm.Cli;

/// <summary>
/// What every `farm` command shares: the global options, how the farm to talk to is found, and how
/// a failure becomes one line on stderr and an exit code.
/// </summary>
public static class CliContext
{
    public const string ConnectionEnvironmentVariable = "FARM_CONNECTION";
    public const string HomeEnvironmentVariable = "FARM_HOME";
    public const string DefaultDataDirectoryName = ".farm";

    /// <summary>`--connection`: a connection string such as <c>Endpoint=http://127.0.0.1:5480</c>.</summary>
    public static Option<string?> ConnectionOption { get; } = new("--connection")
    {
        Description = $"Connection string of the farm (Endpoint=http://host:port). Default: ${ConnectionEnvironmentVariable}, else the local farm started by 'farm up --detach'",
        HelpName = "CONNECTION_STRING",
        Recursive = true,
    };

    /// <summary>`--data`: the local farm's data directory (databases, node files, logs).</summary>
    public static Option<string?> DataOption { get; } = new("--data")
    {
        Description = $"Data directory of the local farm. Default: ${HomeEnvironmentVariable}, else ./{DefaultDataDirectoryName}",
        HelpName = "DIR",
        Recursive = true,
    };

    /// <summary>The data directory as a full path: --data, then $FARM_HOME, then ./.farm.</summary>
    public static string ResolveDataDirectory(ParseResult parseResult)
    {
        var data = parseResult.GetValue(DataOption);
        if (string.IsNullOrWhiteSpace(data))
        {
            data = Environment.GetEnvironmentVariable(HomeEnvironmentVariable);
        }

        if (string.IsNullOrWhiteSpace(data))
        {
            data = Path.Combine(Environment.CurrentDirectory, DefaultDataDirectoryName);
        }

        try
        {
            return Path.GetFullPath(data);
        }
        catch (Exception ex) when (ex is ArgumentException or NotSupportedException or PathTooLongException)
        {
            throw new CliException(ExitCodes.BadInput, $"--data '{data}' is not a valid directory path.");
        }
    }

    /// <summary>
    /// The farm to talk to: --connection, then $FARM_CONNECTION, then the local farm that
    /// 'farm up' recorded in &lt;data&gt;/farm.json. The string is not parsed here; the client does
    /// that and names what is wrong.
    /// </summary>
    public static string ResolveConnectionString(ParseResult parseResult)
    {
        var connection = parseResult.GetValue(ConnectionOption);
        if (!string.IsNullOrWhiteSpace(connection))
        {
            return connection;
        }

        connection = Environment.GetEnvironmentVariable(ConnectionEnvironmentVariable);
        if (!string.IsNullOrWhiteSpace(connection))
        {
            return connection;
        }

        var data = new FarmDataDirectory(ResolveDataDirectory(parseResult));
        var state = FarmStateFile.TryRead(data);
        if (state is { State: FarmState.Running } && state.Nodes.Any(n => n.Pid is { } pid && NodeProcesses.IsFarmNode(pid)))
        {
            return state.ConnectionString;
        }

        var where = state is null ? string.Empty : $" (the farm in {data.Root} is not running)";
        throw new CliException(
            ExitCodes.Unreachable,
            $"No farm found{where}: run ./farm up --detach, or pass --connection / set {ConnectionEnvironmentVariable}");
    }

    /// <summary>Runs the parsed command line: parse errors exit 2, exceptions become one line and an exit code.</summary>
    public static async Task<int> InvokeAsync(RootCommand root, string[] args)
    {
        var parseResult = root.Parse(args);
        if (parseResult.Errors.Count > 0)
        {
            // "Required command was not provided" only adds noise next to the error that caused it.
            var messages = parseResult.Errors.Select(e => e.Message.ReplaceLineEndings(" ").Trim().TrimEnd('.')).Distinct(StringComparer.Ordinal).ToList();
            if (messages.Count > 1)
            {
                messages.RemoveAll(m => m.StartsWith("Required command was not provided", StringComparison.Ordinal));
            }

            var errors = string.Join("; ", messages);
            await Console.Error.WriteLineAsync($"error: {errors} (see 'farm --help')");
            return ExitCodes.BadInput;
        }

        var configuration = new InvocationConfiguration
        {
            EnableDefaultExceptionHandler = false,

            // Ctrl+C / SIGTERM cancel the action's token; 'farm up' in the foreground then needs time
            // to stop its nodes gracefully before the process is torn down.
            ProcessTerminationTimeout = NodeProcesses.GracefulStopTimeout + TimeSpan.FromSeconds(10),
        };

        using var export = CliTelemetry.StartExport();
        var command = CommandPath(parseResult.CommandResult);
        using var activity = CliTelemetry.StartCommand(command);
        int exitCode;
        try
        {
            exitCode = await parseResult.InvokeAsync(configuration);
        }
        catch (Exception ex)
        {
            (exitCode, var message) = Describe(ex);
            await Console.Error.WriteLineAsync($"error: {message}");
        }
        CliTelemetry.Finished(activity, command, exitCode);
        return exitCode;
    }

    /// <summary>"queue create" for `farm queue create ...`: the command's names below the root.</summary>
    private static string CommandPath(System.CommandLine.Parsing.CommandResult result)
    {
        var names = new List<string>();
        for (var current = result; current.Parent is System.CommandLine.Parsing.CommandResult parent; current = parent)
        {
            names.Insert(0, current.Command.Name);
        }
        return string.Join(' ', names);
    }

    /// <summary>The exit code and the one readable line for a failure. No stack traces.</summary>
    public static (int ExitCode, string Message) Describe(Exception exception)
    {
        var ex = Unwrap(exception);
        var exitCode = ex switch
        {
            CliException cli => cli.ExitCode,
            FarmException farm => ExitCodeOf(farm.Reason),
            RpcException rpc => ExitCodeOf(rpc.StatusCode),
            OperationCanceledException => ExitCodes.Cancelled,
            FormatException or ArgumentException => ExitCodes.BadInput,
            HttpRequestException or SocketException or TimeoutException => ExitCodes.Unreachable,
            _ => ExitCodes.Error,
        };

        var message = ex switch
        {
            OperationCanceledException => "Cancelled.",
            RpcException rpc => rpc.TransportFailure() ?? rpc.Status.Detail,
            _ => ex.Message,
        };

        return (exitCode, OneLine(message));
    }

    public static int ExitCodeOf(FarmFailureReason reason) => reason switch
    {
        FarmFailureReason.InvalidArgument or FarmFailureReason.MessageSizeExceeded => ExitCodes.BadInput,
        FarmFailureReason.MessagingEntityNotFound or FarmFailureReason.ContainerNotFound or FarmFailureReason.MessageNotFound => ExitCodes.NotFound,
        FarmFailureReason.ServiceCommunicationProblem or FarmFailureReason.ServiceTimeout => ExitCodes.Unreachable,
        _ => ExitCodes.Error,
    };

    private static int ExitCodeOf(StatusCode status) => status switch
    {
        StatusCode.InvalidArgument or StatusCode.OutOfRange => ExitCodes.BadInput,
        StatusCode.NotFound => ExitCodes.NotFound,
        StatusCode.Unavailable or StatusCode.DeadlineExceeded => ExitCodes.Unreachable,
        _ => ExitCodes.Error,
    };

    private static Exception Unwrap(Exception exception)
    {
        var ex = exception;
        while (ex is AggregateException { InnerExceptions.Count: 1 } aggregate)
        {
            ex = aggregate.InnerExceptions[0];
        }

        return ex;
    }

    private static string OneLine(string message)
    {
        var line = message.ReplaceLineEndings(" ").Trim();
        return line.Length == 0 ? "The command failed." : line;
    }
}

/// <summary>The exit codes of the `farm` command, for scripts.</summary>
public static class ExitCodes
{
    public const int Ok = 0;

    /// <summary>Anything not covered below.</summary>
    public const int Error = 1;

    /// <summary>Bad arguments or input: a parse error, an invalid name, value or connection string.</summary>
    public const int BadInput = 2;

    /// <summary>The entity (queue, container, message) does not exist.</summary>
    public const int NotFound = 3;

    /// <summary>No farm could be reached (none running, refused, timed out).</summary>
    public const int Unreachable = 4;

    /// <summary>Interrupted by Ctrl+C (128 + SIGINT).</summary>
    public const int Cancelled = 130;
}

/// <summary>A failure the CLI itself detected, with the exit code it should end with.</summary>
public sealed class CliException(int exitCode, string message) : Exception(message)
{
    public int ExitCode { get; } = exitCode;
}
