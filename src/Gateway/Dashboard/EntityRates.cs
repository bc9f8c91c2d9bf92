using System.Globalization;

namespace Farm.Gateway.Dashboard;

/// <summary>
/// Send and receive rates per entity for the whole farm, from the nodes' own Prometheus endpoints:
/// each node counts what it did (farm_messages_sent_total / farm_messages_received_total per
/// destination); a rate is the growth of those counters between two scrapes, summed over nodes (an
/// entity's counts move with its container). A counter that went down (a restarted node) counts from zero.
/// </summary>
internal sealed class EntityRates(HttpClient http, TimeProvider time)
{
    private const string SentMetric = "farm_messages_sent_total";
    private const string ReceivedMetric = "farm_messages_received_total";

    private readonly Dictionary<long, Scrape> _previous = [];

    private sealed record Scrape(long Timestamp, Dictionary<(string Metric, string Entity), double> Totals);

    public sealed record Rates(IReadOnlyDictionary<string, double> Send, IReadOnlyDictionary<string, double> Receive);

    /// <summary>Scrapes every node given (id, metrics URL) and returns the rates since the last call.</summary>
    public async Task<Rates> ScrapeAsync(IEnumerable<(long NodeId, string MetricsUrl)> nodes, CancellationToken cancellationToken)
    {
        var send = new Dictionary<string, double>(StringComparer.Ordinal);
        var receive = new Dictionary<string, double>(StringComparer.Ordinal);
        var scrapes = await Task.WhenAll(nodes.Select(async n => (n.NodeId, Scrape: await TryScrapeAsync(n.MetricsUrl, cancellationToken))));
        lock (_previous)
        {
            foreach (var (nodeId, scrape) in scrapes)
            {
                if (scrape is null)
                {
                    continue;
                }
                if (_previous.TryGetValue(nodeId, out var before))
                {
                    var seconds = time.GetElapsedTime(before.Timestamp, scrape.Timestamp).TotalSeconds;
                    if (seconds > 0.05)
                    {
                        foreach (var ((metric, entity), total) in scrape.Totals)
                        {
                            // Absent before: the counter was born since (the entity came to this node). Lower
                            // than before: the node restarted and counted from zero (as Prometheus' rate() reads a reset).
                            var was = before.Totals.GetValueOrDefault((metric, entity));
                            var grown = total >= was ? total - was : total;
                            var rates = metric == SentMetric ? send : receive;
                            rates[entity] = rates.GetValueOrDefault(entity) + grown / seconds;
                        }
                    }
                }
                _previous[nodeId] = scrape;
            }
        }
        return new Rates(send, receive);
    }

    private async Task<Scrape?> TryScrapeAsync(string metricsUrl, CancellationToken cancellationToken)
    {
        if (string.IsNullOrEmpty(metricsUrl))
        {
            return null;
        }
        try
        {
            var text = await http.GetStringAsync(metricsUrl, cancellationToken);
            return new Scrape(time.GetTimestamp(), ParseTotals(text));
        }
        catch (Exception e) when (e is HttpRequestException or TaskCanceledException && !cancellationToken.IsCancellationRequested)
        {
            return null; // a dead or frozen node: no rate from it this time
        }
    }

    /// <summary>The per-destination totals of the two counters in a Prometheus text exposition.</summary>
    internal static Dictionary<(string Metric, string Entity), double> ParseTotals(string exposition)
    {
        var totals = new Dictionary<(string, string), double>();
        foreach (var line in exposition.AsSpan().EnumerateLines())
        {
            var metric = line.StartsWith(SentMetric + "{") ? SentMetric : line.StartsWith(ReceivedMetric + "{") ? ReceivedMetric : null;
            if (metric is null)
            {
                continue;
            }
            var labelsEnd = line.LastIndexOf('}');
            if (labelsEnd < 0 || LabelValue(line[(metric.Length + 1)..labelsEnd], "messaging_destination_name") is not { } entity)
            {
                continue;
            }
            var valueText = line[(labelsEnd + 1)..].Trim();
            var space = valueText.IndexOf(' ');
            if (space > 0)
            {
                valueText = valueText[..space]; // a timestamp may follow the value
            }
            if (double.TryParse(valueText, NumberStyles.Float, CultureInfo.InvariantCulture, out var value))
            {
                totals[(metric, entity)] = totals.GetValueOrDefault((metric, entity)) + value;
            }
        }
        return totals;
    }

    /// <summary>The unescaped value of one label in <c>a="x",b="y"</c>, or null.</summary>
    private static string? LabelValue(ReadOnlySpan<char> labels, string name)
    {
        var at = 0;
        while (at < labels.Length)
        {
            var equals = labels[at..].IndexOf("=\"");
            if (equals < 0)
            {
                return null;
            }
            var label = labels.Slice(at, equals).Trim().TrimStart(',').Trim();
            var value = new System.Text.StringBuilder();
            var i = at + equals + 2;
            for (; i < labels.Length && labels[i] != '"'; i++)
            {
                if (labels[i] == '\\' && i + 1 < labels.Length)
                {
                    i++;
                    value.Append(labels[i] == 'n' ? '\n' : labels[i]);
                }
                else
                {
                    value.Append(labels[i]);
                }
            }
            if (label.SequenceEqual(name))
            {
                return value.ToString();
            }
            at = i + 1;
        }
        return null;
    }
}
