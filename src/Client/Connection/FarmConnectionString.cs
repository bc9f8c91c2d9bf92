using System.Globalization;

namespace Farm.Client;

/// <summary>
/// A parsed Farm connection string:
/// <c>Endpoint=http://127.0.0.1:5480[,http://host2:5480...];EnableRedirect=true|false;OperationTimeout=00:01:00</c>.
/// Keys are case-insensitive; <c>sb://</c> is accepted as an alias for <c>http://</c>. With several
/// endpoints the client fails over between them when one is unavailable.
/// </summary>
public sealed record FarmConnectionString
{
    public const string EndpointKey = "Endpoint";
    public const string EnableRedirectKey = "EnableRedirect";
    public const string OperationTimeoutKey = "OperationTimeout";

    /// <summary>Default port when an endpoint names none (the gateway's default).</summary>
    public const int DefaultPort = 5480;

    public FarmConnectionString(IReadOnlyList<Uri> endpoints, bool enableRedirect = false, TimeSpan? operationTimeout = null)
    {
        ArgumentNullException.ThrowIfNull(endpoints);
        if (endpoints.Count == 0)
        {
            throw new ArgumentException("At least one endpoint is required.", nameof(endpoints));
        }

        Endpoints = endpoints;
        EnableRedirect = enableRedirect;
        OperationTimeout = operationTimeout;
    }

    /// <summary>The gateway (or broker) addresses, http:// URIs, in the order given.</summary>
    public IReadOnlyList<Uri> Endpoints { get; }

    /// <summary>
    /// SBWS EnableRedirect: messaging calls ask a gateway which broker owns the entity (Lookup) and
    /// then talk to that broker directly; management calls always go through a gateway.
    /// </summary>
    public bool EnableRedirect { get; }

    /// <summary>When set, overrides <see cref="FarmRetryOptions.TryTimeout"/>.</summary>
    public TimeSpan? OperationTimeout { get; }

    /// <summary>Parses a connection string; throws <see cref="FormatException"/> naming the bad key or value.</summary>
    public static FarmConnectionString Parse(string connectionString)
    {
        if (string.IsNullOrWhiteSpace(connectionString))
        {
            throw new FormatException("The connection string is empty; Endpoint is missing.");
        }

        List<Uri>? endpoints = null;
        var enableRedirect = false;
        TimeSpan? operationTimeout = null;

        foreach (var rawPart in connectionString.Split(';'))
        {
            var part = rawPart.Trim();
            if (part.Length == 0)
            {
                continue;
            }

            var eq = part.IndexOf('=');
            if (eq <= 0)
            {
                throw new FormatException($"Connection string part '{part}' is not of the form Key=Value.");
            }

            var key = part[..eq].Trim();
            var value = part[(eq + 1)..].Trim();
            if (key.Equals(EndpointKey, StringComparison.OrdinalIgnoreCase))
            {
                endpoints = ParseEndpoints(value);
            }
            else if (key.Equals(EnableRedirectKey, StringComparison.OrdinalIgnoreCase))
            {
                if (!bool.TryParse(value, out enableRedirect))
                {
                    throw new FormatException($"EnableRedirect must be true or false, not '{value}'.");
                }
            }
            else if (key.Equals(OperationTimeoutKey, StringComparison.OrdinalIgnoreCase))
            {
                if (!TimeSpan.TryParse(value, CultureInfo.InvariantCulture, out var timeout) || timeout <= TimeSpan.Zero)
                {
                    throw new FormatException($"OperationTimeout must be a positive time span such as 00:01:00, not '{value}'.");
                }

                operationTimeout = timeout;
            }
            else
            {
                throw new FormatException($"Unknown connection string key '{key}' (known: Endpoint, EnableRedirect, OperationTimeout).");
            }
        }

        if (endpoints is null)
        {
            throw new FormatException("Endpoint is missing from the connection string.");
        }

        return new FarmConnectionString(endpoints, enableRedirect, operationTimeout);
    }

    /// <summary>Parses without throwing.</summary>
    public static bool TryParse(string? connectionString, out FarmConnectionString? result)
    {
        try
        {
            result = Parse(connectionString ?? string.Empty);
            return true;
        }
        catch (FormatException)
        {
            result = null;
            return false;
        }
    }

    public override string ToString()
    {
        var text = $"{EndpointKey}={string.Join(',', Endpoints.Select(e => e.GetLeftPart(UriPartial.Authority)))}";
        if (EnableRedirect)
        {
            text += $";{EnableRedirectKey}=true";
        }

        if (OperationTimeout is { } timeout)
        {
            text += $";{OperationTimeoutKey}={timeout.ToString("c", CultureInfo.InvariantCulture)}";
        }

        return text;
    }

    private static List<Uri> ParseEndpoints(string value)
    {
        var endpoints = new List<Uri>();
        foreach (var raw in value.Split(','))
        {
            var text = raw.Trim();
            if (text.Length == 0)
            {
                continue;
            }

            if (text.StartsWith("sb://", StringComparison.OrdinalIgnoreCase))
            {
                text = "http://" + text["sb://".Length..];
            }
            else if (!text.Contains("://", StringComparison.Ordinal))
            {
                text = "http://" + text;
            }

            if (!Uri.TryCreate(text, UriKind.Absolute, out var uri) || string.IsNullOrEmpty(uri.Host))
            {
                throw new FormatException($"Endpoint '{raw.Trim()}' is not a valid address such as http://127.0.0.1:{DefaultPort}.");
            }

            if (uri.Scheme != Uri.UriSchemeHttp && uri.Scheme != Uri.UriSchemeHttps)
            {
                throw new FormatException($"Endpoint '{raw.Trim()}' must use http:// (or sb://), not {uri.Scheme}://.");
            }

            if (uri.IsDefaultPort && !raw.Contains(":" + uri.Port, StringComparison.Ordinal))
            {
                uri = new UriBuilder(uri) { Port = DefaultPort }.Uri;
            }

            endpoints.Add(new Uri(uri.GetLeftPart(UriPartial.Authority)));
        }

        if (endpoints.Count == 0)
        {
            throw new FormatException("Endpoint is missing a value.");
        }

        return endpoints;
    }
}
