using Farm.Broker.Rules;

namespace Farm.Broker.Tests.Rules;

public sealed class LikePatternTests
{
    [Theory]
    [InlineData("abc", null, "abc", true)]
    [InlineData("abc", null, "abd", false)]
    [InlineData("abc", null, "ABC", false)]
    [InlineData("a%", null, "abc", true)]
    [InlineData("a%", null, "a", true)]
    [InlineData("a%", null, "ba", false)]
    [InlineData("%c", null, "abc", true)]
    [InlineData("%b%", null, "abc", true)]
    [InlineData("%b%", null, "ac", false)]
    [InlineData("a_c", null, "abc", true)]
    [InlineData("a_c", null, "ac", false)]
    [InlineData("a_c", null, "abbc", false)]
    [InlineData("%", null, "", true)]
    [InlineData("_", null, "", false)]
    [InlineData("", null, "", true)]
    [InlineData("", null, "a", false)]
    [InlineData("a%c%e", null, "abcde", true)]
    [InlineData("a%c%e", null, "abcdf", false)]
    [InlineData("%a%b%", null, "xxaxxbxx", true)]
    [InlineData("%a%b%", null, "xxbxxaxx", false)]
    [InlineData("a%%b", null, "ab", true)]
    [InlineData("%%%", null, "x", true)]
    [InlineData("__%", null, "a", false)]
    [InlineData("%_", null, "a", true)]
    [InlineData("%aab", null, "aaab", true)]
    [InlineData("a%b_", null, "abbbc", true)]
    [InlineData("ABC\\%", '\\', "ABC%", true)]
    [InlineData("ABC\\%", '\\', "ABCD", false)]
    [InlineData("a!_b", '!', "a_b", true)]
    [InlineData("a!_b", '!', "axb", false)]
    [InlineData("a!!b", '!', "a!b", true)]
    [InlineData("%!%%", '!', "50%", true)]
    [InlineData("%!%%", '!', "50", false)]
    [InlineData("%!%", '!', "100%", true)]
    public void Pattern_MatchesPercentUnderscoreAndEscapedCharacters(string pattern, char? escape, string text, bool expected) =>
        Assert.Equal(expected, LikePattern.Compile(pattern, escape).IsMatch(text));

    [Fact]
    public void Pattern_EndingInItsEscapeCharacter_IsRejected() =>
        Assert.Throws<ArgumentException>(() => LikePattern.Compile("abc!", '!'));
}
