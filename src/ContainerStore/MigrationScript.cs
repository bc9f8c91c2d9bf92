using System.Globalization;

namespace Farm.ContainerStore;

/// <summary>
/// One versioned schema script, embedded as {Dialect}/Migrations/{schema}/NNNN_name.sql. Every
/// dialect's migrator reads its scripts through here, so versions are parsed the same way.
/// </summary>
internal sealed record MigrationScript(long Version, string Name, string Sql)
{
    /// <summary>The scripts of one schema beside <paramref name="anchor"/>'s namespace, oldest first.</summary>
    public static IReadOnlyList<MigrationScript> Load(Type anchor, string schema)
    {
        var assembly = anchor.Assembly;
        var prefix = $"{anchor.Namespace}.Migrations.{schema}.";
        var migrations = assembly.GetManifestResourceNames()
            .Where(n => n.StartsWith(prefix, StringComparison.Ordinal) && n.EndsWith(".sql", StringComparison.Ordinal))
            .Select(n =>
            {
                var name = n[prefix.Length..^".sql".Length];
                var underscore = name.IndexOf('_', StringComparison.Ordinal);
                var version = long.Parse(underscore < 0 ? name : name[..underscore], NumberStyles.None, CultureInfo.InvariantCulture);
                using var stream = assembly.GetManifestResourceStream(n)!;
                using var reader = new StreamReader(stream);
                return new MigrationScript(version, name, reader.ReadToEnd());
            })
            .OrderBy(m => m.Version)
            .ToList();

        if (migrations.Count == 0)
        {
            throw new InvalidOperationException($"No embedded migrations found under '{prefix}'.");
        }

        return migrations;
    }
}
