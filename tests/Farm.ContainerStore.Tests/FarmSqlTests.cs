using Farm.ContainerStore.FarmDatabase;

namespace Farm.ContainerStore.Tests;

/// <summary>Both dialects give the shared farm store every statement it runs.</summary>
public sealed class FarmSqlTests
{
    [Fact]
    public void EachDialect_HasEveryStatement()
    {
        foreach (var sql in new[] { Farm.ContainerStore.Sqlite.SqliteSql.Farm, Farm.ContainerStore.Postgres.PostgresSql.Farm })
        {
            Assert.All(typeof(FarmSql).GetProperties(), p => Assert.False(string.IsNullOrWhiteSpace((string?)p.GetValue(sql)), p.Name));
        }
        Assert.Contains("RETURNING", Farm.ContainerStore.Sqlite.SqliteSql.Farm.RegisterNode, StringComparison.Ordinal);
        Assert.NotEqual(Farm.ContainerStore.Sqlite.SqliteSql.Farm.RegisterNode, Farm.ContainerStore.Postgres.PostgresSql.Farm.RegisterNode);
    }

    [Fact]
    public void ADialectMissingAStatement_FailsNamingIt()
    {
        var error = Assert.Throws<InvalidOperationException>(() => new FarmSql(typeof(FarmSqlTests)));

        Assert.Contains("has no statement", error.Message, StringComparison.Ordinal);
    }
}
