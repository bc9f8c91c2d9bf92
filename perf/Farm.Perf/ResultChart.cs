namespace Farm.Perf;

/// <summary>
/// A chart a result JSON carries (<c>"charts": [...]</c>); `report` renders each to
/// perf/results/<see cref="File"/> as a PNG. Points are [x, y] pairs.
/// </summary>
internal sealed record ResultChart(
    string File,
    string Title,
    string XLabel,
    string YLabel,
    bool XLog,
    bool YLog,
    IReadOnlyList<ResultChartSeries> Series);

internal sealed record ResultChartSeries(string Name, IReadOnlyList<double[]> Points);
