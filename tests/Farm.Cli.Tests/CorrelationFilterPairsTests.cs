using Farm.Cli.Entities;

namespace Farm.Cli.Tests;

public class CorrelationFilterPairsTests
{
    [Fact]
    public void SysNames_SetTheFields_InAnyCase()
    {
        var filter = CorrelationFilterPairs.Parse(
        [
            "sys.CorrelationId=c", "SYS.messageid=m", "sys.to=t", "sys.ReplyTo=r", "sys.subject=s",
            "sys.SessionId=sid", "sys.ReplyToSessionId=rsid", "sys.ContentType=application/json",
        ]);

        Assert.Equal(
            ("c", "m", "t", "r", "s", "sid", "rsid", "application/json"),
            (filter.CorrelationId, filter.MessageId, filter.To, filter.ReplyTo, filter.Subject, filter.SessionId, filter.ReplyToSessionId, filter.ContentType));
        Assert.Empty(filter.ApplicationProperties);
    }

    [Theory]
    [InlineData("sys.Label=new")]
    [InlineData("Label=new")]
    [InlineData("subject=new")]
    public void Label_IsSubject(string pair)
    {
        Assert.Equal("new", CorrelationFilterPairs.Parse([pair]).Subject);
    }

    [Fact]
    public void BareFieldNames_SetTheFields()
    {
        var filter = CorrelationFilterPairs.Parse(["CorrelationId=c", "contenttype=text/plain"]);

        Assert.Equal(("c", "text/plain"), (filter.CorrelationId, filter.ContentType));
        Assert.Empty(filter.ApplicationProperties);
    }

    [Fact]
    public void UserAndOtherNames_AreTextApplicationProperties()
    {
        var filter = CorrelationFilterPairs.Parse(["user.color=red", "quantity=10", "user.To=x", "note=a=b", "empty="]);

        Assert.Equal("red", filter.ApplicationProperties["color"]);
        Assert.Equal("10", filter.ApplicationProperties["quantity"]);
        Assert.Equal("x", filter.ApplicationProperties["To"]);
        Assert.Equal("a=b", filter.ApplicationProperties["note"]);
        Assert.Equal(string.Empty, filter.ApplicationProperties["empty"]);
        Assert.Null(filter.To);
    }

    [Theory]
    [InlineData("sys.Bogus=1", "'sys.Bogus' is not a system property")]
    [InlineData("sys.SequenceNumber=1", "'sys.SequenceNumber' is not a system property")]
    [InlineData("color", "must be NAME=VALUE")]
    [InlineData("=red", "must be NAME=VALUE")]
    [InlineData("user.=red", "names no application property")]
    [InlineData("sys.CorrelationId=", "CorrelationId needs a value")]
    public void BadPairs_AreBadInput_NamingThePair(string pair, string expected)
    {
        var error = Assert.Throws<CliException>(() => CorrelationFilterPairs.Parse([pair]));

        Assert.Equal(ExitCodes.BadInput, error.ExitCode);
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain('\n', error.Message);
    }

    [Theory]
    [InlineData("sys.Subject=a", "Label=b", "sets Subject twice")]
    [InlineData("color=red", "user.COLOR=blue", "'COLOR' twice")]
    public void Duplicates_AreBadInput(string first, string second, string expected)
    {
        var error = Assert.Throws<CliException>(() => CorrelationFilterPairs.Parse([first, second]));

        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void NoPairs_IsBadInput()
    {
        Assert.Equal(ExitCodes.BadInput, Assert.Throws<CliException>(() => CorrelationFilterPairs.Parse([])).ExitCode);
    }
}
