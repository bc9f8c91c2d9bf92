using System.Collections.Frozen;
using System.Globalization;

namespace Farm.Broker.Rules;

/// <summary>
/// Recursive-descent parser for the Azure Service Bus SQL filter and SQL rule action grammars.
/// Precedence, loosest first: OR; AND; NOT; comparisons, [NOT] LIKE, [NOT] IN, IS [NOT] NULL
/// (non-associative); binary + -; * / %; unary + -; constants, properties, functions, EXISTS and
/// parentheses. Sub-expressions without property reads are evaluated here, once, so a constant
/// error (1/0, a non-string LIKE pattern) is a parse error with its position.
/// </summary>
internal sealed partial class SqlParser
{
    private static readonly FrozenSet<string> Reserved = new[]
    {
        "AND", "OR", "NOT", "LIKE", "ESCAPE", "IN", "IS", "NULL", "TRUE", "FALSE", "EXISTS",
    }.ToFrozenSet(StringComparer.OrdinalIgnoreCase);

    /// <summary>Deeper nesting is refused rather than risking the broker's stack on hostile input.</summary>
    internal const int MaxDepth = 128;

    private readonly List<Token> _tokens;
    private int _index;
    private int _depth;

    private SqlParser(string text) => _tokens = SqlLexer.Tokenize(text);

    private Token Current => _tokens[_index];

    private Token PeekNext => _tokens[Math.Min(_index + 1, _tokens.Count - 1)];

    private Token Advance() => _tokens[_index < _tokens.Count - 1 ? _index++ : _index];

    public static PredicateNode ParseFilter(string text)
    {
        if (string.IsNullOrWhiteSpace(text))
        {
            throw new RuleParseException("The filter expression is empty.", 1);
        }
        var parser = new SqlParser(text);
        var node = parser.ParseOr();
        if (parser.Current.Kind != TokenKind.End)
        {
            throw Unexpected(parser.Current, "AND, OR or the end of the expression");
        }
        return AsPredicate(node);
    }

    // --- predicates -------------------------------------------------------------------------

    private SqlNode ParseOr()
    {
        var left = ParseAnd();
        while (Current.IsKeyword("OR"))
        {
            Advance();
            var right = ParseAnd();
            var l = AsPredicate(left);
            var r = AsPredicate(right);
            left = Fold(new OrNode(l.Position, l, r), l.IsConstant && r.IsConstant, l.Position);
        }
        return left;
    }

    private SqlNode ParseAnd()
    {
        var left = ParseNot();
        while (Current.IsKeyword("AND"))
        {
            Advance();
            var right = ParseNot();
            var l = AsPredicate(left);
            var r = AsPredicate(right);
            left = Fold(new AndNode(l.Position, l, r), l.IsConstant && r.IsConstant, l.Position);
        }
        return left;
    }

    private SqlNode ParseNot()
    {
        if (!Current.IsKeyword("NOT"))
        {
            return ParsePredicate();
        }
        var position = Advance().Position;
        Enter(position);
        var operand = AsPredicate(ParseNot());
        _depth--;
        return Fold(new NotNode(position, operand), operand.IsConstant, position);
    }

    private SqlNode ParsePredicate()
    {
        var left = ParseAdditive();
        var token = Current;
        if (ComparisonOf(token.Kind) is { } op)
        {
            Advance();
            var l = AsValue(left);
            var r = AsValue(ParseAdditive());
            return Fold(new ComparisonNode(l.Position, op, l, r), l.IsConstant && r.IsConstant, token.Position);
        }
        if (token.IsKeyword("IS"))
        {
            Advance();
            var negated = Current.IsKeyword("NOT");
            if (negated)
            {
                Advance();
            }
            if (!Current.IsKeyword("NULL"))
            {
                throw Unexpected(Current, negated ? "NULL" : "NULL or NOT NULL");
            }
            Advance();
            var operand = AsValue(left);
            return Fold(new IsNullNode(operand.Position, operand, negated), operand.IsConstant, token.Position);
        }
        var negate = token.IsKeyword("NOT") && (PeekNext.IsKeyword("LIKE") || PeekNext.IsKeyword("IN"));
        if (negate)
        {
            Advance();
        }
        if (Current.IsKeyword("LIKE"))
        {
            return ParseLike(AsValue(left), negate);
        }
        if (Current.IsKeyword("IN"))
        {
            return ParseIn(AsValue(left), negate);
        }
        return left;
    }

    private PredicateNode ParseLike(ValueNode operand, bool negated)
    {
        var likePosition = Advance().Position;
        var pattern = AsValue(ParseAdditive());
        ValueNode? escape = null;
        if (Current.IsKeyword("ESCAPE"))
        {
            Advance();
            escape = AsValue(ParseAdditive());
        }
        LikeNode node;
        try
        {
            node = new LikeNode(operand.Position, operand, pattern, escape, negated);
        }
        catch (RuleEvaluationException e)
        {
            throw new RuleParseException($"Invalid LIKE at position {pattern.Position}: {e.Message}", pattern.Position);
        }
        var constant = operand.IsConstant && pattern.IsConstant && (escape?.IsConstant ?? true);
        return Fold(node, constant, likePosition);
    }

    private PredicateNode ParseIn(ValueNode operand, bool negated)
    {
        var inPosition = Advance().Position;
        Expect(TokenKind.LeftParen, "'(' after IN");
        var items = new List<ValueNode> { AsValue(ParseAdditive()) };
        while (Current.Kind == TokenKind.Comma)
        {
            Advance();
            items.Add(AsValue(ParseAdditive()));
        }
        Expect(TokenKind.RightParen, "',' or ')'");
        var constant = operand.IsConstant && items.TrueForAll(i => i.IsConstant);
        return Fold(new InNode(operand.Position, operand, [.. items], negated), constant, inPosition);
    }

    private static ComparisonOperator? ComparisonOf(TokenKind kind) => kind switch
    {
        TokenKind.Equal => ComparisonOperator.Equal,
        TokenKind.NotEqual => ComparisonOperator.NotEqual,
        TokenKind.Less => ComparisonOperator.Less,
        TokenKind.LessOrEqual => ComparisonOperator.LessOrEqual,
        TokenKind.Greater => ComparisonOperator.Greater,
        TokenKind.GreaterOrEqual => ComparisonOperator.GreaterOrEqual,
        _ => null,
    };

    // --- expressions ------------------------------------------------------------------------

    private SqlNode ParseAdditive()
    {
        var left = ParseMultiplicative();
        while (Current.Kind is TokenKind.Plus or TokenKind.Minus)
        {
            var token = Advance();
            var op = token.Kind == TokenKind.Plus ? ArithmeticOperator.Add : ArithmeticOperator.Subtract;
            left = Arithmetic(op, left, ParseMultiplicative(), token.Position);
        }
        return left;
    }

    private SqlNode ParseMultiplicative()
    {
        var left = ParseUnary();
        while (Current.Kind is TokenKind.Star or TokenKind.Slash or TokenKind.Percent)
        {
            var token = Advance();
            var op = token.Kind switch
            {
                TokenKind.Star => ArithmeticOperator.Multiply,
                TokenKind.Slash => ArithmeticOperator.Divide,
                _ => ArithmeticOperator.Modulo,
            };
            left = Arithmetic(op, left, ParseUnary(), token.Position);
        }
        return left;
    }

    private ValueNode Arithmetic(ArithmeticOperator op, SqlNode left, SqlNode right, int position)
    {
        var l = AsValue(left);
        var r = AsValue(right);
        return Fold(new ArithmeticNode(l.Position, op, l, r), l.IsConstant && r.IsConstant, position);
    }

    private SqlNode ParseUnary()
    {
        // Every nesting (parentheses, function arguments, signs) comes through here.
        Enter(Current.Position);
        try
        {
            return ParseSigned();
        }
        finally
        {
            _depth--;
        }
    }

    private void Enter(int position)
    {
        if (++_depth > MaxDepth)
        {
            throw new RuleParseException($"The expression nests deeper than {MaxDepth} levels at position {position}.", position);
        }
    }

    private SqlNode ParseSigned()
    {
        if (Current.Kind is not (TokenKind.Plus or TokenKind.Minus))
        {
            return ParsePrimary();
        }
        var sign = Advance();
        if (sign.Kind == TokenKind.Minus && Current.Kind == TokenKind.Integer)
        {
            // Parsed with its sign so that -9223372036854775808 is a long like any other.
            var literal = Advance();
            return new ConstantNode(sign.Position, SqlValue.FromLong(ParseLong("-" + literal.Text, literal.Position)));
        }
        var operand = AsValue(ParseUnary());
        ValueNode node = sign.Kind == TokenKind.Minus
            ? new NegateNode(sign.Position, operand)
            : new UnaryPlusNode(sign.Position, operand);
        return Fold(node, operand.IsConstant, sign.Position);
    }

    private SqlNode ParsePrimary()
    {
        var token = Current;
        switch (token.Kind)
        {
            case TokenKind.Integer:
                Advance();
                return new ConstantNode(token.Position, SqlValue.FromLong(ParseLong(token.Text, token.Position)));
            case TokenKind.Decimal:
                Advance();
                var number = double.Parse(token.Text, NumberStyles.Float, CultureInfo.InvariantCulture);
                if (double.IsInfinity(number))
                {
                    throw new RuleParseException($"The number {token.Text} at position {token.Position} is out of range.", token.Position);
                }
                return new ConstantNode(token.Position, SqlValue.FromDouble(number));
            case TokenKind.String:
                Advance();
                return new ConstantNode(token.Position, SqlValue.FromString(token.Text));
            case TokenKind.LeftParen:
                Advance();
                var inner = ParseOr();
                Expect(TokenKind.RightParen, "')'");
                return inner;
            case TokenKind.QuotedIdentifier:
                return PropertyNode(ParseProperty());
            case TokenKind.Identifier:
                if (token.IsKeyword("TRUE") || token.IsKeyword("FALSE") || token.IsKeyword("NULL"))
                {
                    Advance();
                    var constant = token.IsKeyword("NULL") ? SqlValue.Null : SqlValue.FromBool(token.IsKeyword("TRUE"));
                    return new ConstantNode(token.Position, constant);
                }
                if (token.IsKeyword("EXISTS"))
                {
                    Advance();
                    Expect(TokenKind.LeftParen, "'(' after EXISTS");
                    var (property, _) = ParseProperty();
                    Expect(TokenKind.RightParen, "')'");
                    return new ExistsNode(token.Position, property);
                }
                if (Reserved.Contains(token.Text))
                {
                    throw Unexpected(token, "an expression");
                }
                if (PeekNext.Kind == TokenKind.LeftParen)
                {
                    return ParseFunction();
                }
                return PropertyNode(ParseProperty());
            default:
                throw Unexpected(token, "an expression");
        }
    }

    private static long ParseLong(string text, int position) =>
        long.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var value)
            ? value
            : throw new RuleParseException(
                $"The integer {text} at position {position} is out of the range of a 64-bit integer; write it as {text}.0 for a double.", position);

    private ValueNode PropertyNode(PropertyReference property, int position) => property.System is { } system
        ? new SystemPropertyNode(position, system)
        : new UserPropertyNode(position, property.UserName!);

    private ValueNode PropertyNode((PropertyReference Property, int Position) parsed) => PropertyNode(parsed.Property, parsed.Position);

    /// <summary><c>[sys. | user.] name</c>, name being a regular, [delimited] or "quoted" identifier.</summary>
    private (PropertyReference Property, int Position) ParseProperty()
    {
        var first = Current;
        if (first.Kind == TokenKind.Identifier && PeekNext.Kind == TokenKind.Dot)
        {
            var isSys = first.IsKeyword("sys");
            if (!isSys && !first.IsKeyword("user"))
            {
                throw new RuleParseException(
                    $"Unknown scope '{first.Text}' at position {first.Position}: a property is 'sys.name', 'user.name' or 'name'.", first.Position);
            }
            Advance();
            Advance();
            var name = Current;
            if (name.Kind is not (TokenKind.Identifier or TokenKind.QuotedIdentifier))
            {
                throw Unexpected(name, $"a property name after '{first.Text}.'");
            }
            Advance();
            if (!isSys)
            {
                return (PropertyReference.User(name.Text), first.Position);
            }
            if (!SystemProperty.TryFind(name.Text, out var system))
            {
                throw new RuleParseException(
                    $"'sys.{name.Text}' at position {first.Position} is not a system property; the system properties are {string.Join(", ", SystemProperty.Names)}.",
                    first.Position);
            }
            return (PropertyReference.Sys(system), first.Position);
        }
        if (first.Kind == TokenKind.QuotedIdentifier || (first.Kind == TokenKind.Identifier && !Reserved.Contains(first.Text)))
        {
            Advance();
            return (PropertyReference.User(first.Text), first.Position);
        }
        throw Unexpected(first, "a property name");
    }

    private ValueNode ParseFunction()
    {
        var name = Advance();
        Advance();
        if (name.IsKeyword("newid"))
        {
            Expect(TokenKind.RightParen, "')': newid() takes no argument");
            return new NewIdNode(name.Position);
        }
        if (name.IsKeyword("property") || name.IsKeyword("p"))
        {
            var argument = AsValue(ParseAdditive());
            Expect(TokenKind.RightParen, $"')': {name.Text}() takes one argument");
            if (!argument.IsConstant)
            {
                return new DynamicPropertyNode(name.Position, argument);
            }
            var constant = argument.Evaluate(null!);
            if (constant.Kind != SqlKind.String)
            {
                throw new RuleParseException(
                    $"{name.Text}() at position {name.Position} needs a property name as a string; got {constant}.", argument.Position);
            }
            var reference = PropertyReference.FromName(constant.AsString);
            if (reference.IsSystem && reference.System is null)
            {
                throw new RuleParseException(
                    $"'{constant.AsString}' at position {argument.Position} is not a system property; the system properties are {string.Join(", ", SystemProperty.Names)}.",
                    argument.Position);
            }
            return PropertyNode(reference, name.Position);
        }
        throw new RuleParseException(
            $"Unknown function '{name.Text}' at position {name.Position}: the functions are newid(), property(name) and p(name).", name.Position);
    }

    // --- helpers ----------------------------------------------------------------------------

    private void Expect(TokenKind kind, string expected)
    {
        if (Current.Kind != kind)
        {
            throw Unexpected(Current, expected);
        }
        Advance();
    }

    private static RuleParseException Unexpected(Token token, string expected) => token.Kind == TokenKind.End
        ? new RuleParseException($"Unexpected end of expression at position {token.Position}: expected {expected}.", token.Position)
        : new RuleParseException($"Unexpected token {token.Display} at position {token.Position}: expected {expected}.", token.Position);

    private static PredicateNode AsPredicate(SqlNode node) => node as PredicateNode
        ?? throw new RuleParseException(
            $"Expected a condition at position {node.Position} but found a value: a condition is a comparison, LIKE, IN, IS NULL or EXISTS, possibly combined with AND, OR and NOT.",
            node.Position);

    private static ValueNode AsValue(SqlNode node) => node as ValueNode
        ?? throw new RuleParseException(
            $"Expected a value at position {node.Position} but found a condition: a condition cannot be compared, computed with or assigned.",
            node.Position);

    private static ValueNode Fold(ValueNode node, bool constant, int position)
    {
        if (!constant)
        {
            return node;
        }
        try
        {
            return new ConstantNode(node.Position, node.Evaluate(null!));
        }
        catch (RuleEvaluationException e)
        {
            throw new RuleParseException($"Invalid expression at position {position}: {e.Message}", position);
        }
    }

    private static PredicateNode Fold(PredicateNode node, bool constant, int position)
    {
        if (!constant)
        {
            return node;
        }
        try
        {
            return new ConstantPredicateNode(node.Position, node.Evaluate(null!));
        }
        catch (RuleEvaluationException e)
        {
            throw new RuleParseException($"Invalid expression at position {position}: {e.Message}", position);
        }
    }
}
