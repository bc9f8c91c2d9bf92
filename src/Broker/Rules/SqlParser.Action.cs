namespace Farm.Broker.Rules;

internal sealed partial class SqlParser
{
    /// <summary>
    /// <c>statement [[;] [,] statement]... [;]</c> with <c>SET property = expression</c> and
    /// <c>REMOVE property</c>. The docs' grammar separates statements with commas and makes a
    /// trailing semicolon optional; their own examples chain "SET ...; REMOVE ...;" without commas,
    /// so either separator (or both) is accepted.
    /// </summary>
    public static ActionStatement[] ParseAction(string text)
    {
        if (string.IsNullOrWhiteSpace(text))
        {
            throw new RuleParseException("The action is empty: it needs at least one SET or REMOVE.", 1);
        }
        var parser = new SqlParser(text);
        var statements = new List<ActionStatement>();
        while (true)
        {
            statements.Add(parser.ParseStatement());
            var separated = false;
            if (parser.Current.Kind == TokenKind.Semicolon)
            {
                parser.Advance();
                separated = true;
            }
            if (parser.Current.Kind == TokenKind.Comma)
            {
                parser.Advance();
                if (parser.Current.Kind == TokenKind.End)
                {
                    throw Unexpected(parser.Current, "SET or REMOVE after ','");
                }
                separated = true;
            }
            if (parser.Current.Kind == TokenKind.End)
            {
                return [.. statements];
            }
            if (!separated && !parser.Current.IsKeyword("SET") && !parser.Current.IsKeyword("REMOVE"))
            {
                throw Unexpected(parser.Current, "an operator, ';', ',', SET, REMOVE or the end of the action");
            }
        }
    }

    private ActionStatement ParseStatement()
    {
        var keyword = Current;
        var isSet = keyword.IsKeyword("SET");
        if (!isSet && !keyword.IsKeyword("REMOVE"))
        {
            throw Unexpected(keyword, "SET or REMOVE");
        }
        Advance();
        var (target, position) = ParseProperty();
        if (target.System is { IsSettable: false } readOnly)
        {
            throw new RuleParseException(
                $"sys.{readOnly.Name} at position {position} is set by the broker and cannot be changed by an action.", position);
        }
        if (!isSet)
        {
            return new RemoveStatement(target);
        }
        Expect(TokenKind.Equal, $"'=' after SET {target.Display}");
        return new SetStatement(target, AsValue(ParseAdditive()));
    }
}

/// <summary>One SET or REMOVE, run in order on the action's copy of the message: a later statement sees what an earlier one set.</summary>
internal abstract class ActionStatement
{
    public abstract void Execute(RuleMessage target);
}

internal sealed class SetStatement(PropertyReference property, ValueNode value) : ActionStatement
{
    public override void Execute(RuleMessage target)
    {
        var result = value.Evaluate(target);
        if (property.System is { } system)
        {
            system.Set(target, result);
            return;
        }
        var properties = target.Message.ApplicationProperties;
        var key = target.FindUserPropertyKey(property.UserName!) ?? property.UserName!;
        if (properties.TryGetValue(key, out var existing))
        {
            result = ConvertToExistingType(result, SqlValue.FromProperty(existing).Kind);
        }
        properties[key] = result.ToProperty();
        target.UserPropertiesChanged();
    }

    // "SET performs implicit conversion if possible when the expression type and the existing
    // property type are different": SET quantity = quantity / 2 keeps an int property an int.
    // Where no implicit conversion exists the property takes the new type.
    private static SqlValue ConvertToExistingType(in SqlValue value, SqlKind existing) => (existing, value.Kind) switch
    {
        (SqlKind.Int, SqlKind.Long) when value.AsLong is >= int.MinValue and <= int.MaxValue => SqlValue.FromInt((int)value.AsLong),
        (SqlKind.Long, SqlKind.Int) => SqlValue.FromLong(value.AsLong),
        (SqlKind.Double, SqlKind.Int or SqlKind.Long) => SqlValue.FromDouble(value.AsDouble),
        _ => value,
    };
}

internal sealed class RemoveStatement(PropertyReference property) : ActionStatement
{
    public override void Execute(RuleMessage target)
    {
        if (property.System is { } system)
        {
            // A system property cannot disappear; removing it clears it.
            system.Set(target, SqlValue.Null);
            return;
        }
        if (target.FindUserPropertyKey(property.UserName!) is { } key)
        {
            target.Message.ApplicationProperties.Remove(key);
            target.UserPropertiesChanged();
        }
    }
}
