namespace Farm.Broker.Rules;

/// <summary>SQL three-valued logic: a filter selects a message only when it evaluates to True.</summary>
internal enum Tri : byte
{
    False = 0,
    True = 1,
    Unknown = 2,
}

internal enum ComparisonOperator : byte { Equal, NotEqual, Less, LessOrEqual, Greater, GreaterOrEqual }

internal enum ArithmeticOperator : byte { Add, Subtract, Multiply, Divide, Modulo }

/// <summary>
/// Operator semantics. Azure Service Bus says operators "follow C# implicit conversion semantics"
/// and that any unknown operand makes the result unknown; where C# has no operator for a pair of
/// types we follow this split:
/// <list type="bullet">
/// <item>Comparisons between types that cannot be compared (a string and a number, a boolean and a
/// string...) are unknown, so the message simply does not match: a property that one sender sets as
/// a string and another as a number must not dead-letter messages.</item>
/// <item>Arithmetic on types it does not apply to, integer division by zero and overflow of
/// DateTime/TimeSpan arithmetic are errors (<see cref="RuleEvaluationException"/>), as the C#
/// binding Azure describes would throw.</item>
/// </list>
/// </summary>
internal static class SqlOperators
{
    public static Tri FromBool(bool value) => value ? Tri.True : Tri.False;

    public static Tri Not(Tri value) => value switch
    {
        Tri.True => Tri.False,
        Tri.False => Tri.True,
        _ => Tri.Unknown,
    };

    public static string Symbol(ComparisonOperator op) => op switch
    {
        ComparisonOperator.Equal => "=",
        ComparisonOperator.NotEqual => "<>",
        ComparisonOperator.Less => "<",
        ComparisonOperator.LessOrEqual => "<=",
        ComparisonOperator.Greater => ">",
        _ => ">=",
    };

    public static string Symbol(ArithmeticOperator op) => op switch
    {
        ArithmeticOperator.Add => "+",
        ArithmeticOperator.Subtract => "-",
        ArithmeticOperator.Multiply => "*",
        ArithmeticOperator.Divide => "/",
        _ => "%",
    };

    public static Tri Equal(in SqlValue left, in SqlValue right) => Compare(ComparisonOperator.Equal, left, right);

    public static Tri Compare(ComparisonOperator op, in SqlValue left, in SqlValue right)
    {
        if (left.IsNull || right.IsNull)
        {
            return Tri.Unknown;
        }
        if (left.IsNumeric && right.IsNumeric)
        {
            if (left.Kind == SqlKind.Double || right.Kind == SqlKind.Double)
            {
                // C# double comparison: NaN is unequal to everything, itself included.
                double l = left.AsDouble, r = right.AsDouble;
                return FromBool(op switch
                {
                    ComparisonOperator.Equal => l == r,
                    ComparisonOperator.NotEqual => l != r,
                    ComparisonOperator.Less => l < r,
                    ComparisonOperator.LessOrEqual => l <= r,
                    ComparisonOperator.Greater => l > r,
                    _ => l >= r,
                });
            }
            return Ordered(op, left.AsLong.CompareTo(right.AsLong));
        }
        if (left.Kind != right.Kind)
        {
            return Tri.Unknown;
        }
        switch (left.Kind)
        {
            case SqlKind.String:
                return op switch
                {
                    ComparisonOperator.Equal => FromBool(string.Equals(left.AsString, right.AsString, StringComparison.Ordinal)),
                    ComparisonOperator.NotEqual => FromBool(!string.Equals(left.AsString, right.AsString, StringComparison.Ordinal)),
                    _ => Ordered(op, string.CompareOrdinal(left.AsString, right.AsString)),
                };
            case SqlKind.DateTime:
            case SqlKind.TimeSpan:
                // Both keep their ticks in the same slot.
                return Ordered(op, left.AsLong.CompareTo(right.AsLong));
            case SqlKind.Bool:
                return EqualityOnly(op, left.AsBool == right.AsBool);
            case SqlKind.Guid:
                return EqualityOnly(op, left.AsGuid == right.AsGuid);
            case SqlKind.Bytes:
                return EqualityOnly(op, left.AsBytes.Equals(right.AsBytes));
            default:
                return Tri.Unknown;
        }
    }

    private static Tri Ordered(ComparisonOperator op, int comparison) => FromBool(op switch
    {
        ComparisonOperator.Equal => comparison == 0,
        ComparisonOperator.NotEqual => comparison != 0,
        ComparisonOperator.Less => comparison < 0,
        ComparisonOperator.LessOrEqual => comparison <= 0,
        ComparisonOperator.Greater => comparison > 0,
        _ => comparison >= 0,
    });

    // Booleans, GUIDs and byte strings have no order in C#; ordering them is unknown, not an error.
    private static Tri EqualityOnly(ComparisonOperator op, bool equal) => op switch
    {
        ComparisonOperator.Equal => FromBool(equal),
        ComparisonOperator.NotEqual => FromBool(!equal),
        _ => Tri.Unknown,
    };

    public static SqlValue Negate(in SqlValue operand)
    {
        switch (operand.Kind)
        {
            case SqlKind.Null:
                return SqlValue.Null;
            case SqlKind.Int:
                return SqlValue.FromInt(unchecked(-operand.AsInt));
            case SqlKind.Long:
                return SqlValue.FromLong(unchecked(-operand.AsLong));
            case SqlKind.Double:
                return SqlValue.FromDouble(-operand.AsDouble);
            case SqlKind.TimeSpan when operand.AsLong != TimeSpan.MinValue.Ticks:
                return SqlValue.FromTimeSpan(-operand.AsTimeSpan);
            default:
                throw new RuleEvaluationException($"Operator '-' cannot be applied to an operand of type '{SqlValue.KindName(operand.Kind)}'.");
        }
    }

    public static SqlValue Plus(in SqlValue operand) => operand.Kind switch
    {
        SqlKind.Null or SqlKind.Int or SqlKind.Long or SqlKind.Double or SqlKind.TimeSpan => operand,
        _ => throw new RuleEvaluationException($"Operator '+' cannot be applied to an operand of type '{SqlValue.KindName(operand.Kind)}'."),
    };

    public static SqlValue Arithmetic(ArithmeticOperator op, in SqlValue left, in SqlValue right)
    {
        if (left.IsNull || right.IsNull)
        {
            return SqlValue.Null;
        }
        try
        {
            if (left.IsNumeric && right.IsNumeric)
            {
                return Numeric(op, left, right);
            }
            if (op == ArithmeticOperator.Add && (left.Kind == SqlKind.String || right.Kind == SqlKind.String))
            {
                // C# string + object concatenates.
                return SqlValue.FromString(string.Concat(left.ToInvariantString(), right.ToInvariantString()));
            }
            var result = Temporal(op, left, right);
            if (result is { } value)
            {
                return value;
            }
        }
        catch (ArithmeticException e)
        {
            throw new RuleEvaluationException(
                $"{Describe(op, left, right)} failed: {e.Message}", e);
        }
        catch (ArgumentException e)
        {
            // DateTime/TimeSpan results outside their range (or a NaN scale factor).
            throw new RuleEvaluationException(
                $"{Describe(op, left, right)} is out of range.", e);
        }
        throw new RuleEvaluationException(
            $"Operator '{Symbol(op)}' cannot be applied to operands of type '{SqlValue.KindName(left.Kind)}' and '{SqlValue.KindName(right.Kind)}'.");
    }

    private static string Describe(ArithmeticOperator op, in SqlValue left, in SqlValue right) =>
        $"{left} {Symbol(op)} {right}";

    private static SqlValue Numeric(ArithmeticOperator op, in SqlValue left, in SqlValue right)
    {
        if (left.Kind == SqlKind.Double || right.Kind == SqlKind.Double)
        {
            double l = left.AsDouble, r = right.AsDouble;
            return SqlValue.FromDouble(op switch
            {
                ArithmeticOperator.Add => l + r,
                ArithmeticOperator.Subtract => l - r,
                ArithmeticOperator.Multiply => l * r,
                ArithmeticOperator.Divide => l / r,
                _ => l % r,
            });
        }
        if ((op is ArithmeticOperator.Divide or ArithmeticOperator.Modulo) && right.AsLong == 0)
        {
            throw new RuleEvaluationException($"{Describe(op, left, right)}: division by zero.");
        }
        if (left.Kind == SqlKind.Int && right.Kind == SqlKind.Int)
        {
            // int op int stays int, wrapping on overflow like unchecked C#.
            int l = left.AsInt, r = right.AsInt;
            return SqlValue.FromInt(op switch
            {
                ArithmeticOperator.Add => unchecked(l + r),
                ArithmeticOperator.Subtract => unchecked(l - r),
                ArithmeticOperator.Multiply => unchecked(l * r),
                ArithmeticOperator.Divide => l / r,
                _ => r == -1 ? 0 : l % r,
            });
        }
        {
            long l = left.AsLong, r = right.AsLong;
            return SqlValue.FromLong(op switch
            {
                ArithmeticOperator.Add => unchecked(l + r),
                ArithmeticOperator.Subtract => unchecked(l - r),
                ArithmeticOperator.Multiply => unchecked(l * r),
                ArithmeticOperator.Divide => l / r,
                _ => r == -1 ? 0 : l % r,
            });
        }
    }

    /// <summary>The DateTime and TimeSpan operators C# defines; null when there is none for the pair.</summary>
    private static SqlValue? Temporal(ArithmeticOperator op, in SqlValue left, in SqlValue right)
    {
        return (left.Kind, right.Kind, op) switch
        {
            (SqlKind.DateTime, SqlKind.TimeSpan, ArithmeticOperator.Add) => SqlValue.FromDateTime(left.AsDateTime + right.AsTimeSpan),
            (SqlKind.DateTime, SqlKind.TimeSpan, ArithmeticOperator.Subtract) => SqlValue.FromDateTime(left.AsDateTime - right.AsTimeSpan),
            (SqlKind.DateTime, SqlKind.DateTime, ArithmeticOperator.Subtract) => SqlValue.FromTimeSpan(left.AsDateTime - right.AsDateTime),
            (SqlKind.TimeSpan, SqlKind.TimeSpan, ArithmeticOperator.Add) => SqlValue.FromTimeSpan(left.AsTimeSpan + right.AsTimeSpan),
            (SqlKind.TimeSpan, SqlKind.TimeSpan, ArithmeticOperator.Subtract) => SqlValue.FromTimeSpan(left.AsTimeSpan - right.AsTimeSpan),
            (SqlKind.TimeSpan, SqlKind.TimeSpan, ArithmeticOperator.Divide) => SqlValue.FromDouble(left.AsTimeSpan / right.AsTimeSpan),
            (SqlKind.TimeSpan, SqlKind.Int or SqlKind.Long or SqlKind.Double, ArithmeticOperator.Multiply) => SqlValue.FromTimeSpan(left.AsTimeSpan * right.AsDouble),
            (SqlKind.Int or SqlKind.Long or SqlKind.Double, SqlKind.TimeSpan, ArithmeticOperator.Multiply) => SqlValue.FromTimeSpan(left.AsDouble * right.AsTimeSpan),
            (SqlKind.TimeSpan, SqlKind.Int or SqlKind.Long or SqlKind.Double, ArithmeticOperator.Divide) => SqlValue.FromTimeSpan(left.AsTimeSpan / right.AsDouble),
            _ => null,
        };
    }
}
