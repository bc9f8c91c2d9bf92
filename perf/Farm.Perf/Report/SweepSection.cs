using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;

namespace Farm.Perf.Report;

/// <summary>
/// The report's "Charts" and "Points" sections, from every results/*.json: each chart a result
/// carries (<c>charts</c>) drawn to results/charts/&lt;file&gt; and embedded, and each result with
/// <c>points</c> as a table, one row per point. Generic on purpose: any scenario that writes the
/// same fields shows up without code here.
/// </summary>
internal static class SweepSection
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    /// <summary>Known point fields, in this order, with their column titles; other scalar fields follow under their own names.</summary>
    private static readonly (string Key, string Title)[] KnownColumns =
    [
        ("msgs_per_sec", "msg/s received"), ("sent_per_sec", "msg/s sent"), ("p50_ms", "p50 ms"), ("p90_ms", "p90 ms"),
        ("p99_ms", "p99 ms"), ("p999_ms", "p99.9 ms"), ("messages", "messages"), ("duration_s", "window s"),
    ];

    public static void Append(StringBuilder md, string results, string reportPath)
    {
        var files = Directory.GetFiles(results, "*.json").Order(StringComparer.Ordinal)
            .Select(path => (Path: path, Json: JsonNode.Parse(File.ReadAllText(path))))
            .Where(f => f.Json is JsonObject)
            .ToList();
        var chartsDirectory = Path.Combine(results, "charts");
        var link = Path.GetRelativePath(Path.GetDirectoryName(Path.GetFullPath(reportPath))!, Path.GetFullPath(chartsDirectory)).Replace('\\', '/');

        md.AppendLine();
        md.AppendLine("## Charts");
        md.AppendLine();
        var drawn = 0;
        foreach (var (path, json) in files)
        {
            foreach (var chart in json!["charts"] as JsonArray ?? [])
            {
                if (chart?["file"]?.ToString() is not { Length: > 0 } file || file.Contains('/', StringComparison.Ordinal) || file.Contains('\\', StringComparison.Ordinal))
                {
                    continue;
                }

                var title = chart["title"]?.ToString() ?? file;
                try
                {
                    ChartRenderer.Render(chart, Path.Combine(chartsDirectory, file));
                    md.AppendLine($"![{title}]({link}/{file})");
                    md.AppendLine();
                    md.AppendLine($"*{title}* ({json["scenario"]}, {Date(json["timestamp"])}).");
                    md.AppendLine();
                    drawn++;
                }
                catch (Exception e) when (e is DllNotFoundException or TypeInitializationException or IOException or UnauthorizedAccessException or InvalidOperationException or ArgumentException or FormatException)
                {
                    md.AppendLine($"{title}: could not be drawn ({e.GetType().Name}: {e.Message}).");
                    md.AppendLine();
                    Console.Error.WriteLine($"perf report: chart {file} of {Path.GetFileName(path)} could not be drawn: {e.Message}");
                }
            }
        }

        if (drawn == 0)
        {
            md.AppendLine("No result carries charts yet (the sweeps write them: perf/run.sh batch-sizes concurrency latency).");
            md.AppendLine();
        }

        md.AppendLine("## Points");
        foreach (var (_, json) in files)
        {
            if (json!["points"] is JsonArray { Count: > 0 } points)
            {
                AppendTable(md, json, points);
            }
        }
    }

    private static void AppendTable(StringBuilder md, JsonNode result, JsonArray points)
    {
        md.AppendLine();
        md.AppendLine($"### {result["scenario"]} ({Date(result["timestamp"])})");
        md.AppendLine();
        if (result["passed"]?.GetValue<bool>() == false)
        {
            md.AppendLine("**This run failed its delivery check: its figures do not count.**");
            md.AppendLine();
        }

        var objects = points.OfType<JsonObject>().ToList();
        var others = objects.SelectMany(p => p.Where(f => f.Value is JsonValue).Select(f => f.Key))
            .Distinct(StringComparer.Ordinal)
            .Where(k => k is not ("name" or "x") && KnownColumns.All(c => c.Key != k))
            .ToList();
        var columns = KnownColumns.Where(c => objects.Any(p => p.ContainsKey(c.Key))).Concat(others.Select(k => (Key: k, Title: k))).ToList();
        var checks = objects.Any(p => p["verification"] is JsonObject);
        md.AppendLine($"| point | {string.Join(" | ", columns.Select(c => c.Title))} |{(checks ? " check |" : string.Empty)}");
        md.AppendLine($"|---|{string.Concat(columns.Select(_ => "---|"))}{(checks ? "---|" : string.Empty)}");
        foreach (var point in objects)
        {
            var check = point["verification"]?["passed"]?.GetValue<bool>() switch
            {
                true => " passed |",
                false => " **failed** |",
                null => " - |",
            };
            md.AppendLine($"| {point["name"] ?? point["x"]} | {string.Join(" | ", columns.Select(c => Cell(point[c.Key])))} |{(checks ? check : string.Empty)}");
        }

        foreach (var (key, text) in new[] { ("ratio", "ratio"), ("ratio_one_by_one", "one complete at a time / receive-and-delete") })
        {
            if (result[key] is JsonValue value && value.TryGetValue<double>(out var ratio))
            {
                var of = key == "ratio" ? $" ({result["farm"]?["name"]} / {result["peer"]?["name"]})" : string.Empty;
                md.AppendLine();
                md.AppendLine($"{text}{of}: {ratio.ToString("0.00", Inv)}");
            }
        }
    }

    private static string Cell(JsonNode? node) => node switch
    {
        null => "-",
        JsonValue value when value.TryGetValue<double>(out var number) =>
            number >= 1000 ? number.ToString("#,0", Inv) : number.ToString("0.##", Inv),
        _ => node.ToString().Replace("|", "\\|", StringComparison.Ordinal),
    };

    private static string Date(JsonNode? when) =>
        when?.ToString() is { Length: >= 10 } text && DateTime.TryParse(text, Inv, DateTimeStyles.AdjustToUniversal, out var at) ? at.ToString("yyyy-MM-dd", Inv) : "-";
}
