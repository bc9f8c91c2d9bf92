using System.Text;

namespace Farm.Broker.Rules;

internal enum TokenKind : byte
{
    End,
    Identifier,
    /// <summary>[name] or "name": never a keyword.</summary>
    QuotedIdentifier,
    Integer,
    Decimal,
    String,
    LeftParen,
    RightParen,
    Comma,
    Dot,
    Semicolon,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// <param name="Position">1-based index of the token's first character.</param>
/// <param name="Text">The identifier or string with its quoting removed, else the source text.</param>
internal readonly record struct Token(TokenKind Kind, int Position, string Text)
{
    public bool IsKeyword(string keyword) =>
        Kind == TokenKind.Identifier && string.Equals(Text, keyword, StringComparison.OrdinalIgnoreCase);

    /// <summary>How an error message shows this token.</summary>
    public string Display => Kind switch
    {
        TokenKind.End => "end of expression",
        TokenKind.String => $"string '{Text}'",
        TokenKind.QuotedIdentifier => $"'[{Text}]'",
        _ => $"'{Text}'",
    };
}

/// <summary>Splits rule text into tokens, per the Azure Service Bus SQL filter and action grammar.</summary>
internal static class SqlLexer
{
    public static List<Token> Tokenize(string text)
    {
        var tokens = new List<Token>();
        var i = 0;
        while (true)
        {
            while (i < text.Length && char.IsWhiteSpace(text[i]))
            {
                i++;
            }
            if (i >= text.Length)
            {
                tokens.Add(new Token(TokenKind.End, text.Length + 1, ""));
                return tokens;
            }
            var start = i;
            var c = text[i];
            if (char.IsLetter(c))
            {
                // [[:IsLetter:]][_[:IsLetter:][:IsDigit:]]*
                i++;
                while (i < text.Length && (char.IsLetterOrDigit(text[i]) || text[i] == '_'))
                {
                    i++;
                }
                tokens.Add(new Token(TokenKind.Identifier, start + 1, text[start..i]));
                continue;
            }
            if (char.IsAsciiDigit(c))
            {
                tokens.Add(ReadNumber(text, ref i));
                continue;
            }
            switch (c)
            {
                case '\'':
                    tokens.Add(new Token(TokenKind.String, start + 1, ReadQuoted(text, ref i, '\'', "string constant")));
                    continue;
                case '[':
                    tokens.Add(new Token(TokenKind.QuotedIdentifier, start + 1, ReadQuoted(text, ref i, ']', "delimited identifier")));
                    continue;
                case '"':
                    tokens.Add(new Token(TokenKind.QuotedIdentifier, start + 1, ReadQuoted(text, ref i, '"', "quoted identifier")));
                    continue;
                case '@':
                    throw new RuleParseException(
                        $"Parameters such as '@name' are not supported (position {start + 1}); write the value into the expression.", start + 1);
            }
            var (kind, length) = c switch
            {
                '(' => (TokenKind.LeftParen, 1),
                ')' => (TokenKind.RightParen, 1),
                ',' => (TokenKind.Comma, 1),
                '.' => (TokenKind.Dot, 1),
                ';' => (TokenKind.Semicolon, 1),
                '+' => (TokenKind.Plus, 1),
                '-' => (TokenKind.Minus, 1),
                '*' => (TokenKind.Star, 1),
                '/' => (TokenKind.Slash, 1),
                '%' => (TokenKind.Percent, 1),
                '=' => (TokenKind.Equal, 1),
                '<' when Peek(text, i + 1) == '>' => (TokenKind.NotEqual, 2),
                '<' when Peek(text, i + 1) == '=' => (TokenKind.LessOrEqual, 2),
                '<' => (TokenKind.Less, 1),
                '>' when Peek(text, i + 1) == '=' => (TokenKind.GreaterOrEqual, 2),
                '>' => (TokenKind.Greater, 1),
                '!' when Peek(text, i + 1) == '=' => (TokenKind.NotEqual, 2),
                _ => throw new RuleParseException($"Unexpected character '{c}' at position {start + 1}.", start + 1),
            };
            i += length;
            tokens.Add(new Token(kind, start + 1, text.Substring(start, length)));
        }
    }

    private static char Peek(string text, int index) => index < text.Length ? text[index] : '\0';

    // <integer_constant>: digits. <decimal_constant>: digits '.' digits.
    // <approximate_number_constant>: either, with an exponent (101.5E5, 0.5E-2, 1E3).
    private static Token ReadNumber(string text, ref int i)
    {
        var start = i;
        var isDecimal = false;
        while (i < text.Length && char.IsAsciiDigit(text[i]))
        {
            i++;
        }
        if (i < text.Length && text[i] == '.')
        {
            isDecimal = true;
            i++;
            while (i < text.Length && char.IsAsciiDigit(text[i]))
            {
                i++;
            }
        }
        if (i < text.Length && (text[i] is 'e' or 'E'))
        {
            var exponent = i + 1;
            if (exponent < text.Length && text[exponent] is '+' or '-')
            {
                exponent++;
            }
            if (exponent < text.Length && char.IsAsciiDigit(text[exponent]))
            {
                isDecimal = true;
                i = exponent;
                while (i < text.Length && char.IsAsciiDigit(text[i]))
                {
                    i++;
                }
            }
            else
            {
                throw new RuleParseException(
                    $"Malformed number '{text[start..Math.Min(exponent, text.Length)]}' at position {start + 1}: the exponent has no digits.", start + 1);
            }
        }
        if (i < text.Length && (char.IsLetter(text[i]) || text[i] == '_'))
        {
            throw new RuleParseException(
                $"Malformed number at position {start + 1}: '{text[start..(i + 1)]}' runs into a name.", start + 1);
        }
        return new Token(isDecimal ? TokenKind.Decimal : TokenKind.Integer, start + 1, text[start..i]);
    }

    /// <summary>Reads up to the closing character; a doubled closing character stands for itself.</summary>
    private static string ReadQuoted(string text, ref int i, char close, string what)
    {
        var start = i;
        i++;
        StringBuilder? builder = null;
        var runStart = i;
        while (i < text.Length)
        {
            if (text[i] == close)
            {
                if (i + 1 < text.Length && text[i + 1] == close)
                {
                    builder ??= new StringBuilder();
                    builder.Append(text, runStart, i - runStart + 1);
                    i += 2;
                    runStart = i;
                    continue;
                }
                var value = builder is null
                    ? text[runStart..i]
                    : builder.Append(text, runStart, i - runStart).ToString();
                i++;
                return value;
            }
            i++;
        }
        throw new RuleParseException($"Unterminated {what} starting at position {start + 1}.", start + 1);
    }
}
