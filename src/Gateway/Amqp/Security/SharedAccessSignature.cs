using System.Diagnostics.CodeAnalysis;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;

namespace Farm.Gateway.Amqp.Security;

/// <summary>
/// A SharedAccessSignature token as Azure Service Bus clients make it:
/// <c>SharedAccessSignature sr=URL-ENCODED-AUDIENCE&amp;sig=URL-ENCODED-BASE64&amp;se=UNIX-SECONDS&amp;skn=POLICY</c>,
/// where sig is HMAC-SHA256, keyed with the policy's key (its base64 text as UTF-8 bytes, as the
/// SDKs do), over "URL-ENCODED-AUDIENCE\nEXPIRY".
/// </summary>
internal sealed record SharedAccessSignature(string EncodedAudience, string Audience, string Signature, long Expiry, string KeyName)
{
    private const string Prefix = "SharedAccessSignature ";

    public DateTimeOffset ExpiresAt => DateTimeOffset.FromUnixTimeSeconds(Expiry);

    public static bool TryParse(string? token, [NotNullWhen(true)] out SharedAccessSignature? signature, [NotNullWhen(false)] out string? error)
    {
        signature = null;
        if (string.IsNullOrWhiteSpace(token) || !token.StartsWith(Prefix, StringComparison.OrdinalIgnoreCase))
        {
            error = "The token is not a SharedAccessSignature (it must start with 'SharedAccessSignature ').";
            return false;
        }
        string? sr = null, sig = null, se = null, skn = null;
        foreach (var pair in token[Prefix.Length..].Trim().Split('&', StringSplitOptions.RemoveEmptyEntries))
        {
            var equals = pair.IndexOf('=', StringComparison.Ordinal);
            if (equals <= 0)
            {
                error = $"The SharedAccessSignature has a malformed field '{pair}'.";
                return false;
            }
            var value = pair[(equals + 1)..];
            switch (pair[..equals].ToLowerInvariant())
            {
                case "sr": sr = value; break;
                case "sig": sig = value; break;
                case "se": se = value; break;
                case "skn": skn = value; break;
                default: break; // Fields Farm does not use are allowed, as Azure allows them.
            }
        }
        if (sr is null || sig is null || se is null || skn is null)
        {
            error = "The SharedAccessSignature needs sr, sig, se and skn.";
            return false;
        }
        if (!long.TryParse(se, NumberStyles.None, CultureInfo.InvariantCulture, out var expiry))
        {
            error = $"The SharedAccessSignature's expiry se='{se}' is not a number of seconds since 1970.";
            return false;
        }
        signature = new SharedAccessSignature(sr, Uri.UnescapeDataString(sr), Uri.UnescapeDataString(sig), expiry, Uri.UnescapeDataString(skn));
        error = null;
        return true;
    }

    /// <summary>True when <paramref name="key"/> signed this token (constant-time comparison).</summary>
    public bool IsSignedWith(string key)
    {
        var expected = Sign(key, EncodedAudience, Expiry);
        return CryptographicOperations.FixedTimeEquals(Encoding.ASCII.GetBytes(expected), Encoding.ASCII.GetBytes(Signature));
    }

    /// <summary>The base64 HMAC-SHA256 signature of an audience (already URL-encoded) and expiry.</summary>
    public static string Sign(string key, string encodedAudience, long expiry)
    {
        var toSign = Encoding.UTF8.GetBytes(encodedAudience + "\n" + expiry.ToString(CultureInfo.InvariantCulture));
        return Convert.ToBase64String(HMACSHA256.HashData(Encoding.UTF8.GetBytes(key), toSign));
    }

    /// <summary>A token as an SDK would make it (for tests and tools).</summary>
    public static string Create(string keyName, string key, string audience, DateTimeOffset expiresAt)
    {
        var encodedAudience = Uri.EscapeDataString(audience);
        var expiry = expiresAt.ToUnixTimeSeconds();
        var signature = Sign(key, encodedAudience, expiry);
        return string.Create(CultureInfo.InvariantCulture,
            $"{Prefix}sr={encodedAudience}&sig={Uri.EscapeDataString(signature)}&se={expiry}&skn={Uri.EscapeDataString(keyName)}");
    }

    /// <summary>
    /// The entity path a token's audience names ("" for the whole namespace): the path of an
    /// sb:// or amqp:// URL, or the audience itself when it is not a URL. The host is not compared:
    /// a farm is reached under many names (each node, a load balancer, a container's service name).
    /// </summary>
    public static string PathOf(string audience)
    {
        var text = audience.Trim();
        if (Uri.TryCreate(text, UriKind.Absolute, out var uri) && uri.Scheme is "sb" or "amqp" or "amqps" or "http" or "https")
        {
            text = Uri.UnescapeDataString(uri.AbsolutePath);
        }
        return text.Trim('/');
    }

    /// <summary>True when a token for <paramref name="audiencePath"/> covers <paramref name="entityPath"/>: the same path, a parent, or the namespace.</summary>
    public static bool Covers(string audiencePath, string entityPath)
    {
        var entity = entityPath.Trim('/');
        if (audiencePath.Length == 0)
        {
            return true;
        }
        return entity.Equals(audiencePath, StringComparison.OrdinalIgnoreCase)
            || (entity.Length > audiencePath.Length && entity[audiencePath.Length] == '/' && entity.StartsWith(audiencePath, StringComparison.OrdinalIgnoreCase));
    }
}
