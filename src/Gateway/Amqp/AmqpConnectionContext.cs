using System.Collections.Concurrent;
using Farm.ContainerStore.FarmDatabase;
using Farm.Gateway.Amqp.Security;
using Microsoft.Azure.Amqp;

namespace Farm.Gateway.Amqp;

/// <summary>
/// What the front door keeps per AMQP connection: the claims its put-tokens granted, and the links
/// the client opened to receive answers from $cbs and $management, by the address its requests
/// name as reply-to (an SDK uses the link's target address, or, where it leaves that empty as the
/// JavaScript SDK does for $cbs, the link's name).
/// </summary>
internal sealed class AmqpConnectionContext(TimeProvider time, TimeSpan tokenCheckInterval) : IDisposable
{
    private readonly ConcurrentDictionary<string, SendingAmqpLink> _replyLinks = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<AmqpLink, (string EntityPath, AccessRights Right)> _watched = new();
    private ITimer? _tokenCheck;

    public ConnectionClaims Claims { get; } = new(time);

    /// <summary>
    /// Ends <paramref name="link"/> with amqp:unauthorized-access once no unexpired token covers
    /// its entity with <paramref name="right"/> (an SDK puts a fresh token before the old one
    /// expires; a client that stops doing so loses its links).
    /// </summary>
    public void WatchTokenExpiry(AmqpLink link, string entityPath, AccessRights right)
    {
        _watched[link] = (entityPath, right);
        link.Closed += (_, _) => _watched.TryRemove(link, out _);
        lock (_watched)
        {
            _tokenCheck ??= time.CreateTimer(_ => CheckTokens(), null, tokenCheckInterval, tokenCheckInterval);
        }
    }

    private void CheckTokens()
    {
        foreach (var (link, (entityPath, right)) in _watched)
        {
            if (Claims.ValidUntil(entityPath, right) is null && _watched.TryRemove(link, out _))
            {
                link.SafeClose(new AmqpException(AmqpErrorCode.UnauthorizedAccess,
                    $"Unauthorized access: the token that let this link use '{entityPath}' expired and no new one was put on $cbs."));
            }
        }
    }

    public void Dispose()
    {
        _tokenCheck?.Dispose();
        _watched.Clear();
    }

    public static AmqpConnectionContext Of(AmqpConnection connection) =>
        connection.Extensions.Find<AmqpConnectionContext>() ?? throw new InvalidOperationException("The AMQP connection has no front-door context.");

    public void AddReplyLink(SendingAmqpLink link)
    {
        var names = ReplyNamesOf(link);
        foreach (var name in names)
        {
            _replyLinks[name] = link;
        }
        link.Closed += (_, _) =>
        {
            foreach (var name in names)
            {
                _replyLinks.TryRemove(KeyValuePair.Create(name, link));
            }
        };
    }

    public SendingAmqpLink? ReplyLink(string? replyTo) =>
        replyTo is { Length: > 0 } && _replyLinks.TryGetValue(replyTo, out var link) ? link : null;

    private static List<string> ReplyNamesOf(SendingAmqpLink link)
    {
        var names = new List<string> { link.Name };
        if ((link.Settings.Target as Microsoft.Azure.Amqp.Framing.Target)?.Address?.ToString() is { Length: > 0 } target && target != link.Name)
        {
            names.Add(target);
        }
        return names;
    }
}
