namespace Farm.Broker.Rules;

/// <summary>
/// The parsed form of filters and actions, evaluated directly: each node is a small sealed class
/// whose Evaluate is a virtual call that allocates nothing for numbers, booleans, times and
/// property reads. Value nodes produce a <see cref="SqlValue"/>, predicate nodes a <see cref="Tri"/>;
/// the parser never lets one stand where the other belongs.
/// </summary>
internal abstract class SqlNode(int position)
{
    /// <summary>1-based character index where this node starts in the rule text.</summary>
    public int Position { get; } = position;
}

internal abstract class ValueNode(int position) : SqlNode(position)
{
    public abstract SqlValue Evaluate(RuleMessage message);

    /// <summary>True when the node reads nothing from the message and calls no newid(): the parser folds it.</summary>
    public virtual bool IsConstant => false;
}

internal abstract class PredicateNode(int position) : SqlNode(position)
{
    public abstract Tri Evaluate(RuleMessage message);

    public virtual bool IsConstant => false;
}

internal sealed class ConstantNode(int position, SqlValue value) : ValueNode(position)
{
    public SqlValue Value { get; } = value;

    public override SqlValue Evaluate(RuleMessage message) => Value;

    public override bool IsConstant => true;
}

internal sealed class UserPropertyNode(int position, string name) : ValueNode(position)
{
    public string Name { get; } = name;

    public override SqlValue Evaluate(RuleMessage message) => message.GetUserProperty(Name);
}

internal sealed class SystemPropertyNode(int position, SystemProperty property) : ValueNode(position)
{
    public SystemProperty Property { get; } = property;

    public override SqlValue Evaluate(RuleMessage message) => Property.Get(message);
}

/// <summary>property(name) / p(name) whose name is only known per message.</summary>
internal sealed class DynamicPropertyNode(int position, ValueNode nameExpression) : ValueNode(position)
{
    public override SqlValue Evaluate(RuleMessage message)
    {
        var name = nameExpression.Evaluate(message);
        if (name.IsNull)
        {
            return SqlValue.Null;
        }
        if (name.Kind != SqlKind.String)
        {
            throw new RuleEvaluationException(
                $"property() needs a string name; got {SqlValue.KindName(name.Kind)} {name}.");
        }
        var reference = PropertyReference.FromName(name.AsString);
        if (reference.IsSystem && reference.System is null)
        {
            throw new RuleEvaluationException($"'{name.AsString}' is not a system property.");
        }
        return reference.System is { } system ? system.Get(message) : message.GetUserProperty(reference.UserName!);
    }
}

internal sealed class NewIdNode(int position) : ValueNode(position)
{
    public override SqlValue Evaluate(RuleMessage message) => SqlValue.FromGuid(Guid.NewGuid());
}

internal sealed class NegateNode(int position, ValueNode operand) : ValueNode(position)
{
    public override SqlValue Evaluate(RuleMessage message) => SqlOperators.Negate(operand.Evaluate(message));
}

internal sealed class UnaryPlusNode(int position, ValueNode operand) : ValueNode(position)
{
    public override SqlValue Evaluate(RuleMessage message) => SqlOperators.Plus(operand.Evaluate(message));
}

internal sealed class ArithmeticNode(int position, ArithmeticOperator op, ValueNode left, ValueNode right) : ValueNode(position)
{
    public override SqlValue Evaluate(RuleMessage message) =>
        SqlOperators.Arithmetic(op, left.Evaluate(message), right.Evaluate(message));
}

internal sealed class ConstantPredicateNode(int position, Tri value) : PredicateNode(position)
{
    public Tri Value { get; } = value;

    public override Tri Evaluate(RuleMessage message) => Value;

    public override bool IsConstant => true;
}

internal sealed class ComparisonNode(int position, ComparisonOperator op, ValueNode left, ValueNode right) : PredicateNode(position)
{
    public override Tri Evaluate(RuleMessage message) =>
        SqlOperators.Compare(op, left.Evaluate(message), right.Evaluate(message));
}

/// <summary>AND per Azure's table: False wins over Unknown, so the right side is skipped after a False.</summary>
internal sealed class AndNode(int position, PredicateNode left, PredicateNode right) : PredicateNode(position)
{
    public override Tri Evaluate(RuleMessage message)
    {
        var l = left.Evaluate(message);
        if (l == Tri.False)
        {
            return Tri.False;
        }
        var r = right.Evaluate(message);
        return r == Tri.False ? Tri.False : l == Tri.True && r == Tri.True ? Tri.True : Tri.Unknown;
    }
}

/// <summary>OR per Azure's table: True wins over Unknown, so the right side is skipped after a True.</summary>
internal sealed class OrNode(int position, PredicateNode left, PredicateNode right) : PredicateNode(position)
{
    public override Tri Evaluate(RuleMessage message)
    {
        var l = left.Evaluate(message);
        if (l == Tri.True)
        {
            return Tri.True;
        }
        var r = right.Evaluate(message);
        return r == Tri.True ? Tri.True : l == Tri.False && r == Tri.False ? Tri.False : Tri.Unknown;
    }
}

internal sealed class NotNode(int position, PredicateNode operand) : PredicateNode(position)
{
    public override Tri Evaluate(RuleMessage message) => SqlOperators.Not(operand.Evaluate(message));
}

/// <summary>IS [NOT] NULL is never unknown: a missing property and a property without a value are both NULL.</summary>
internal sealed class IsNullNode(int position, ValueNode operand, bool negated) : PredicateNode(position)
{
    public override Tri Evaluate(RuleMessage message) =>
        SqlOperators.FromBool(operand.Evaluate(message).IsNull != negated);
}

/// <summary>EXISTS(user property) asks whether the key is there, even with no value; for a system property, whether it has a value.</summary>
internal sealed class ExistsNode(int position, PropertyReference property) : PredicateNode(position)
{
    public override Tri Evaluate(RuleMessage message) => SqlOperators.FromBool(
        property.System is { } system
            ? !system.Get(message).IsNull
            : message.TryGetUserProperty(property.UserName!, out _));
}

internal sealed class InNode(int position, ValueNode operand, ValueNode[] list, bool negated) : PredicateNode(position)
{
    // Azure: "If the left operand is evaluated as unknown, then the result is unknown"; it says
    // nothing of NULL list items, so they simply never match (unlike SQL-92's NOT IN).
    public override Tri Evaluate(RuleMessage message)
    {
        var value = operand.Evaluate(message);
        if (value.IsNull)
        {
            return Tri.Unknown;
        }
        foreach (var item in list)
        {
            if (SqlOperators.Equal(value, item.Evaluate(message)) == Tri.True)
            {
                return negated ? Tri.False : Tri.True;
            }
        }
        return negated ? Tri.True : Tri.False;
    }
}

internal sealed class LikeNode : PredicateNode
{
    private readonly ValueNode _operand;
    private readonly ValueNode _pattern;
    private readonly ValueNode? _escape;
    private readonly bool _negated;

    // Compiled once when pattern and escape are constants (the usual case).
    private readonly LikePattern? _compiled;

    public LikeNode(int position, ValueNode operand, ValueNode pattern, ValueNode? escape, bool negated)
        : base(position)
    {
        _operand = operand;
        _pattern = pattern;
        _escape = escape;
        _negated = negated;
        if (pattern.IsConstant && (escape is null || escape.IsConstant))
        {
            var p = pattern.Evaluate(null!);
            var e = escape?.Evaluate(null!) ?? SqlValue.Null;
            if (!p.IsNull && (escape is null || !e.IsNull))
            {
                _compiled = Compile(p, e, escape is not null);
            }
        }
    }

    public override Tri Evaluate(RuleMessage message)
    {
        var value = _operand.Evaluate(message);
        if (value.IsNull)
        {
            return Tri.Unknown;
        }
        var compiled = _compiled;
        if (compiled is null)
        {
            var pattern = _pattern.Evaluate(message);
            var escape = _escape?.Evaluate(message) ?? SqlValue.Null;
            if (pattern.IsNull || (_escape is not null && escape.IsNull))
            {
                return Tri.Unknown;
            }
            compiled = Compile(pattern, escape, _escape is not null);
        }
        // Like a comparison of a number with a string: not an error, just no match.
        if (value.Kind != SqlKind.String)
        {
            return Tri.Unknown;
        }
        return SqlOperators.FromBool(compiled.IsMatch(value.AsString) != _negated);
    }

    /// <summary>Throws <see cref="RuleEvaluationException"/> for a pattern that is not a string or a bad escape.</summary>
    public static LikePattern Compile(in SqlValue pattern, in SqlValue escape, bool hasEscape)
    {
        if (pattern.Kind != SqlKind.String)
        {
            throw new RuleEvaluationException($"A LIKE pattern must be a string; got {SqlValue.KindName(pattern.Kind)} {pattern}.");
        }
        char? escapeChar = null;
        if (hasEscape)
        {
            if (escape.Kind != SqlKind.String || escape.AsString.Length != 1)
            {
                throw new RuleEvaluationException($"A LIKE escape must be a string of one character; got {escape}.");
            }
            escapeChar = escape.AsString[0];
        }
        try
        {
            return LikePattern.Compile(pattern.AsString, escapeChar);
        }
        catch (ArgumentException e)
        {
            throw new RuleEvaluationException(e.Message, e);
        }
    }
}

/// <summary>A property named in rule text: a system property, or a user (application) property.</summary>
internal readonly record struct PropertyReference(SystemProperty? System, string? UserName, bool IsSystem)
{
    public static PropertyReference User(string name) => new(null, name, false);

    public static PropertyReference Sys(SystemProperty property) => new(property, null, true);

    /// <summary>"sys.X", "user.X" or "X" as property(name) takes it; an unknown sys name gives IsSystem with no System.</summary>
    public static PropertyReference FromName(string name)
    {
        if (name.StartsWith("sys.", StringComparison.OrdinalIgnoreCase))
        {
            return SystemProperty.TryFind(name[4..], out var system) ? Sys(system) : new(null, null, true);
        }
        return User(name.StartsWith("user.", StringComparison.OrdinalIgnoreCase) ? name[5..] : name);
    }

    public string Display => System is { } s ? "sys." + s.Name : "user." + UserName;
}
