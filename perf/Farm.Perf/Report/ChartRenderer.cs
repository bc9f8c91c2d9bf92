using System.Globalization;
using System.Text.Json.Nodes;

namespace Farm.Perf.Report;

/// <summary>
/// Draws one chart of a result JSON (<c>{"file","title","x_label","y_label","x_log","y_log",
/// "series":[{"name","points":[[x,y],...]}], "x_ticks":[{"x","label"}], "kind":"line|bar"}</c>; x_ticks
/// and kind optional, lines by default) as a
/// PNG with ScottPlot, headless. A logarithmic axis is drawn as log10 of the values with the
/// values as labels (ScottPlot has no log axis of its own); points at or below 0 cannot be on it
/// and are left out.
/// </summary>
internal static class ChartRenderer
{
    private const int Width = 900;
    private const int Height = 500;
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    public static void Render(JsonNode chart, string path)
    {
        var xLog = chart["x_log"]?.GetValue<bool>() == true;
        var yLog = chart["y_log"]?.GetValue<bool>() == true;
        var bars = chart["kind"]?.ToString() == "bar";
        var plot = new ScottPlot.Plot();
        var xs = new SortedSet<double>();
        var ys = new List<double>();
        var series = chart["series"]?.AsArray() ?? [];
        foreach (var line in series)
        {
            var points = (line?["points"]?.AsArray() ?? [])
                .Select(p => (X: p?[0]?.GetValue<double>() ?? double.NaN, Y: p?[1]?.GetValue<double>() ?? double.NaN))
                .Where(p => double.IsFinite(p.X) && double.IsFinite(p.Y) && (!xLog || p.X > 0) && (!yLog || p.Y > 0))
                .OrderBy(p => p.X)
                .ToList();
            if (points.Count == 0)
            {
                continue;
            }

            var x = points.Select(p => xLog ? Math.Log10(p.X) : p.X).ToArray();
            var y = points.Select(p => yLog ? Math.Log10(p.Y) : p.Y).ToArray();
            // A legend only where there is more than one series to tell apart.
            var name = series.Count > 1 ? line?["name"]?.ToString() ?? string.Empty : string.Empty;
            if (bars)
            {
                plot.Add.Bars(x, y).LegendText = name;
            }
            else
            {
                var scatter = plot.Add.Scatter(x, y);
                scatter.LegendText = name;
                scatter.MarkerSize = 7;
                scatter.LineWidth = 2;
            }

            xs.UnionWith(points.Select(p => p.X));
            ys.AddRange(points.Select(p => p.Y));
        }

        if (xs.Count > 0)
        {
            // Room at both ends, so the first and last tick labels are not cut off.
            var low = xLog ? Math.Log10(xs.Min) : xs.Min;
            var high = xLog ? Math.Log10(xs.Max) : xs.Max;
            var pad = Math.Max((high - low) * 0.08, 0.5);
            plot.Axes.SetLimitsX(low - pad, high + pad);
        }

        if (chart["x_ticks"] is JsonArray ticks && ticks.Count > 0)
        {
            plot.Axes.Bottom.SetTicks(
                [.. ticks.Select(t => t?["x"]?.GetValue<double>() ?? 0).Select(x => xLog ? Math.Log10(x) : x)],
                [.. ticks.Select(t => t?["label"]?.ToString() ?? string.Empty)]);
        }
        else if (xLog)
        {
            // A sweep's few x values (1, 10, 100, 900; 1, 2, 4, 8) are the ticks.
            plot.Axes.Bottom.SetTicks([.. xs.Select(Math.Log10)], [.. xs.Select(x => x.ToString("#,0.###", Inv))]);
        }

        if (yLog)
        {
            var ticks10 = new ScottPlot.TickGenerators.NumericAutomatic
            {
                MinorTickGenerator = new ScottPlot.TickGenerators.LogMinorTickGenerator(),
                IntegerTicksOnly = true,
                LabelFormatter = y => Math.Pow(10, y).ToString("#,0.###", Inv),
            };
            plot.Axes.Left.TickGenerator = ticks10;
            if (ys.Count > 0)
            {
                // Whole decades around the data, so the labelled ticks show.
                plot.Axes.SetLimitsY(Math.Floor(Math.Log10(ys.Min())), Math.Ceiling(Math.Log10(ys.Max())));
            }
        }
        else if (ys.Count > 0)
        {
            // Throughput from 0: a chart that starts at the lowest point exaggerates differences.
            plot.Axes.SetLimitsY(Math.Min(0, ys.Min()), ys.Max() * 1.1);
        }

        plot.Title(chart["title"]?.ToString() ?? string.Empty);
        plot.XLabel(chart["x_label"]?.ToString() ?? string.Empty);
        plot.YLabel(chart["y_label"]?.ToString() ?? string.Empty);
        if (series.Count > 1)
        {
            plot.ShowLegend(ScottPlot.Alignment.UpperLeft);
        }

        Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
        plot.SavePng(path, Width, Height);
    }
}
