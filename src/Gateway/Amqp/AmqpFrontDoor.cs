using System.Net;
using System.Net.Sockets;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Farm.ContainerStore.FarmDatabase;
using Farm.Gateway.Amqp.Links;
using Farm.Gateway.Amqp.Management;
using Farm.Gateway.Amqp.Security;
using Farm.Gateway.Hosting;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Framing;
using Microsoft.Azure.Amqp.Sasl;
using Microsoft.Azure.Amqp.Transport;

namespace Farm.Gateway.Amqp;

/// <summary>
/// The node's AMQP 1.0 listener, for the Azure Service Bus SDKs: SASL (ANONYMOUS, as they use it:
/// the credentials are the $cbs tokens), then per link: $cbs, ENTITY/$management, or an entity
/// (queue, topic, subscription, dead-letter queue) to send to or receive from. Every messaging
/// operation goes to the farm through this node's gRPC front door (<see cref="FarmCalls"/>), so a
/// link may land on any node. Built on Microsoft.Azure.Amqp, the library Azure Service Bus's own
/// clients are built on.
/// </summary>
internal sealed partial class AmqpFrontDoor : IRuntimeProvider, IHostedService, IDisposable
{
    private readonly AmqpOptions _options;
    private readonly NodeHostOptions _host;
    private readonly CbsNode _cbs;
    private readonly ManagementNode _management;
    private readonly FarmCalls _calls;
    private readonly TimeProvider _time;
    private readonly ILogger<AmqpFrontDoor> _logger;
    private readonly ILoggerFactory _loggers;
    private AmqpSettings? _settings;
    private AmqpTransportListener? _listener;

    public AmqpFrontDoor(AmqpOptions options, NodeHostOptions host, CbsNode cbs, ManagementNode management, FarmCalls calls, TimeProvider time, ILoggerFactory loggers)
    {
        _options = options;
        _host = host;
        _cbs = cbs;
        _management = management;
        _calls = calls;
        _time = time;
        _loggers = loggers;
        _logger = loggers.CreateLogger<AmqpFrontDoor>();
    }

    /// <summary>The port it listens on, once started.</summary>
    public int Port { get; private set; }

    /// <summary>amqp://host:port, as clients reach it (the advertised host when there is one).</summary>
    public string Address { get; private set; } = string.Empty;

    public Task StartAsync(CancellationToken cancellationToken)
    {
        var settings = new AmqpSettings { RuntimeProvider = this };
        var sasl = new SaslTransportProvider();
        sasl.Versions.Add(new AmqpVersion(1, 0, 0));
        // The SDKs authenticate with $cbs tokens after an anonymous SASL exchange (the .NET one names it MSSBCBS).
        sasl.AddHandler(new SaslAnonymousHandler());
        sasl.AddHandler(new SaslAnonymousHandler("MSSBCBS"));
        settings.TransportProviders.Add(sasl);
        var amqp = new AmqpTransportProvider();
        amqp.Versions.Add(new AmqpVersion(1, 0, 0));
        settings.TransportProviders.Add(amqp);
        // A port picked here (--amqp-port 0) is free when picked, but another process may bind it
        // before this listener does (seen in a clean-clone test run): then pick another.
        for (var attempt = 1; ; attempt++)
        {
            Port = _options.Port != 0 ? _options.Port : FreePort(_host.Host);
            var tcp = new TcpTransportSettings { Host = _host.Host, Port = Port };
            try
            {
                _listener = new AmqpTransportListener([tcp.CreateListener()], settings);
                _listener.Listen(OnAcceptTransport);
                break;
            }
            catch (SocketException e) when (_options.Port == 0 && e.SocketErrorCode == SocketError.AddressAlreadyInUse && attempt < 5)
            {
                _listener?.Close();
                _listener = null;
            }
            catch (SocketException e)
            {
                throw new ListenerBindException($"cannot listen for AMQP on {_host.Host}:{Port} (--amqp-port): {e.Message}", e);
            }
        }
        _settings = settings;
        // Registered with the node (before it starts, which every hosted service's start precedes),
        // so `farm up`, `farm status` and `farm connection-string --amqp` can name it.
        var bound = new IPEndPoint(IPAddress.TryParse(_host.Host, out var ip) ? ip : IPAddress.Loopback, Port);
        Address = NodeListeners.AmqpAddressOf(bound, _host.AdvertiseHost);
        _host.Node.AmqpAddress = Address;
        LogListening(_logger, Address);
        return Task.CompletedTask;
    }

    public Task StopAsync(CancellationToken cancellationToken)
    {
        _listener?.Close();
        return Task.CompletedTask;
    }

    public void Dispose() => _listener?.Close();

    private static int FreePort(string host)
    {
        var address = IPAddress.TryParse(host, out var parsed) ? parsed : IPAddress.Loopback;
        using var probe = new TcpListener(address, 0);
        probe.Start();
        return ((IPEndPoint)probe.LocalEndpoint).Port;
    }

    private void OnAcceptTransport(TransportListener listener, TransportAsyncCallbackArgs args)
    {
        AmqpConnection? connection = null;
        try
        {
            var connectionSettings = new AmqpConnectionSettings
            {
                ContainerId = $"farm-node-{_host.Node.NodeId}",
                IdleTimeOut = (uint)_options.IdleTimeout.TotalMilliseconds,
                MaxFrameSize = 64 * 1024,
            };
            connection = CreateConnection(args.Transport, (ProtocolHeader)args.UserToken, false, _settings!, connectionSettings);
            _ = OpenConnectionAsync(connection);
        }
        catch (Exception e)
        {
            LogConnectionFailed(_logger, e.Message);
            connection?.SafeClose(e);
        }
    }

    private async Task OpenConnectionAsync(AmqpConnection connection)
    {
        try
        {
            await connection.OpenAsync(AmqpConstants.DefaultTimeout).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            LogConnectionFailed(_logger, e.Message);
            connection.SafeClose(e);
        }
    }

    public AmqpConnection CreateConnection(TransportBase transport, ProtocolHeader protocolHeader, bool isInitiator, AmqpSettings amqpSettings, AmqpConnectionSettings connectionSettings)
    {
        var connection = new AmqpConnection(transport, protocolHeader, isInitiator, amqpSettings, connectionSettings);
        var context = new AmqpConnectionContext(_time, _options.TokenCheckInterval);
        connection.Extensions.Add(context);
        connection.Closed += (_, _) => context.Dispose();
        return connection;
    }

    public AmqpSession CreateSession(AmqpConnection connection, AmqpSessionSettings settings) =>
        throw new InvalidOperationException("The node does not begin sessions; clients do.");

    public AmqpLink CreateLink(AmqpSession session, AmqpLinkSettings settings)
    {
        // The settings are the node's side of the link: role true means the node receives (the client sends).
        if (settings.Role == true)
        {
            settings.MaxMessageSize = _options.MaxMessageSize;
            return new ReceivingAmqpLink(session, settings);
        }
        return new SendingAmqpLink(session, settings);
    }

    public IAsyncResult BeginOpenLink(AmqpLink link, TimeSpan timeout, AsyncCallback callback, object state)
    {
        var completion = new TaskCompletionSource(state);
        OpenLinkAsync(link).ContinueWith(opened =>
        {
            if (opened.Exception is { } failed)
            {
                completion.TrySetException(failed.InnerExceptions);
            }
            else
            {
                completion.TrySetResult();
            }
            callback?.Invoke(completion.Task);
        }, TaskScheduler.Default);
        return completion.Task;
    }

    public void EndOpenLink(IAsyncResult result) => ((Task)result).GetAwaiter().GetResult();

    private async Task OpenLinkAsync(AmqpLink link)
    {
        var connection = AmqpConnectionContext.Of(link.Session.Connection);
        var clientSends = link.IsReceiver;
        var address = NormalizeAddress(clientSends ? (link.Settings.Target as Target)?.Address?.ToString() : (link.Settings.Source as Source)?.Address?.ToString());
        try
        {
            if (address.Length == 0)
            {
                throw new AmqpException(AmqpErrorCode.InvalidField, "The link names no address: attach to an entity, 'ENTITY/$management' or '$cbs'.");
            }
            if (address == CbsNode.Address)
            {
                AttachToNode(_cbs, link, connection, address);
                return;
            }
            if (address.EndsWith(ManagementNode.Suffix, StringComparison.OrdinalIgnoreCase))
            {
                RequireClaim(connection, address, AccessRights.Listen | AccessRights.Send | AccessRights.Manage, anyOf: true);
                AttachToNode(_management, link, connection, address[..^ManagementNode.Suffix.Length]);
                return;
            }
            await AttachToEntityAsync(link, connection, address, clientSends).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            var error = AmqpErrors.ToError(e);
            LogLinkRefused(_logger, address, clientSends ? "send" : "receive", error.Condition.Value, error.Description);
            throw new AmqpException(error);
        }
    }

    private static void AttachToNode(RequestNode node, AmqpLink link, AmqpConnectionContext connection, string entityPath)
    {
        if (link is ReceivingAmqpLink requests)
        {
            node.AttachRequestLink(requests, connection, entityPath);
        }
        else
        {
            RequestNode.AttachReplyLink((SendingAmqpLink)link, connection);
        }
    }

    private async Task AttachToEntityAsync(AmqpLink link, AmqpConnectionContext connection, string entityPath, bool clientSends)
    {
        var right = clientSends ? AccessRights.Send : AccessRights.Listen;
        RequireClaim(connection, entityPath, right, anyOf: false);
        if (!clientSends && (link.Settings.Source as Source)?.FilterSet is { } filters
            && filters.TryGetValue<object>(ManagementNode.SessionFilter, out _))
        {
            throw new AmqpException(AmqpErrorCode.NotImplemented,
                $"Sessions are not supported yet: '{entityPath}' cannot be received from by session (Farm serves session-less receivers only).");
        }
        if (!EntityNames.TryParsePath(entityPath, out var name, out var deadLetter, out var invalid))
        {
            throw new AmqpException(AmqpErrors.ArgumentError, invalid!);
        }
        if (clientSends && (deadLetter || EntityNames.IsSubscriptionPath(name)))
        {
            throw new AmqpException(AmqpErrorCode.NotAllowed,
                $"'{entityPath}' cannot be sent to: send to a queue or a topic (a subscription gets its messages through its topic, a dead-letter queue by dead-lettering).");
        }
        // Refused at attach, as Azure does, rather than at the first message: the entity must exist.
        await _calls.Node.Messaging.LookupAsync(new LookupRequest { Entity = entityPath }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);

        connection.WatchTokenExpiry(link, entityPath, right);
        if (link is ReceivingAmqpLink incoming)
        {
            _ = new IncomingMessageLink(incoming, entityPath, _calls, _loggers.CreateLogger<IncomingMessageLink>());
        }
        else
        {
            _ = new OutgoingMessageLink((SendingAmqpLink)link, entityPath, _calls, _time, _loggers.CreateLogger<OutgoingMessageLink>());
        }
    }

    private static void RequireClaim(AmqpConnectionContext connection, string entityPath, AccessRights right, bool anyOf)
    {
        var allowed = anyOf
            ? connection.Claims.ValidUntil(entityPath, AccessRights.Listen) ?? connection.Claims.ValidUntil(entityPath, AccessRights.Send)
            : connection.Claims.ValidUntil(entityPath, right);
        if (allowed is null)
        {
            var needed = anyOf ? "a valid token" : $"a valid token with the {right} right";
            throw new AmqpException(AmqpErrorCode.UnauthorizedAccess,
                $"Unauthorized access: '{entityPath}' needs {needed} (put one on $cbs first; Send for senders, Listen for receivers).");
        }
    }

    /// <summary>An entity path from a link address: "q", "/q", or a whole URL "sb://host/q".</summary>
    internal static string NormalizeAddress(string? address)
    {
        if (string.IsNullOrWhiteSpace(address))
        {
            return string.Empty;
        }
        var text = address.Trim();
        if (Uri.TryCreate(text, UriKind.Absolute, out var uri) && uri.Scheme is "sb" or "amqp" or "amqps")
        {
            text = Uri.UnescapeDataString(uri.AbsolutePath);
        }
        return text.Trim('/');
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "AMQP 1.0 listening at {Address}")]
    private static partial void LogListening(ILogger logger, string address);

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP connection failed to open: {Why}")]
    private static partial void LogConnectionFailed(ILogger logger, string why);

    [LoggerMessage(Level = LogLevel.Information, Message = "AMQP {Direction} link to '{Address}' refused: {Condition}: {Why}")]
    private static partial void LogLinkRefused(ILogger logger, string address, string direction, string condition, string? why);
}

/// <summary>A listener of the node's own could not bind its port; the message names which and where.</summary>
internal sealed class ListenerBindException(string message, Exception inner) : IOException(message, inner);
