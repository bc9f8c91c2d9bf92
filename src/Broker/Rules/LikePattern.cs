namespace Farm.Broker.Rules;

/// <summary>
/// A compiled LIKE pattern: '%' is any run of characters, '_' exactly one, and the optional escape
/// character makes the next character literal. Matching is ordinal (case-sensitive), like string
/// '=' in Azure Service Bus filters. The common shapes ('abc', 'abc%', '%abc', '%abc%') become
/// plain string calls.
/// </summary>
internal sealed class LikePattern
{
    private enum Shape : byte { Equals, StartsWith, EndsWith, Contains, General }

    private readonly Shape _shape;
    private readonly string _literal = "";
    private readonly Element[] _elements = [];

    private readonly record struct Element(char Char, ElementKind Kind);

    private enum ElementKind : byte { Literal, One, Many }

    private LikePattern(Shape shape, string literal, Element[] elements)
    {
        _shape = shape;
        _literal = literal;
        _elements = elements;
    }

    /// <summary>Throws <see cref="ArgumentException"/> when the pattern ends in the escape character.</summary>
    public static LikePattern Compile(string pattern, char? escape)
    {
        var elements = new List<Element>(pattern.Length);
        for (var i = 0; i < pattern.Length; i++)
        {
            var c = pattern[i];
            if (escape is { } e && c == e)
            {
                if (i + 1 >= pattern.Length)
                {
                    throw new ArgumentException($"The LIKE pattern '{pattern}' ends with its escape character '{e}'.");
                }
                elements.Add(new Element(pattern[++i], ElementKind.Literal));
            }
            else if (c == '%')
            {
                // Runs of '%' mean the same as one.
                if (elements.Count == 0 || elements[^1].Kind != ElementKind.Many)
                {
                    elements.Add(new Element('%', ElementKind.Many));
                }
            }
            else
            {
                elements.Add(new Element(c, c == '_' ? ElementKind.One : ElementKind.Literal));
            }
        }

        var manyCount = 0;
        var hasOne = false;
        foreach (var element in elements)
        {
            manyCount += element.Kind == ElementKind.Many ? 1 : 0;
            hasOne |= element.Kind == ElementKind.One;
        }
        if (!hasOne)
        {
            var first = elements.Count > 0 && elements[0].Kind == ElementKind.Many;
            var last = elements.Count > 0 && elements[^1].Kind == ElementKind.Many;
            var literal = string.Concat(elements.Where(x => x.Kind == ElementKind.Literal).Select(x => x.Char));
            switch (manyCount)
            {
                case 0:
                    return new LikePattern(Shape.Equals, literal, []);
                case 1 when last:
                    return new LikePattern(Shape.StartsWith, literal, []);
                case 1 when first:
                    return new LikePattern(Shape.EndsWith, literal, []);
                case 2 when first && last:
                    return new LikePattern(Shape.Contains, literal, []);
            }
        }
        return new LikePattern(Shape.General, "", [.. elements]);
    }

    public bool IsMatch(string text) => _shape switch
    {
        Shape.Equals => string.Equals(text, _literal, StringComparison.Ordinal),
        Shape.StartsWith => text.StartsWith(_literal, StringComparison.Ordinal),
        Shape.EndsWith => text.EndsWith(_literal, StringComparison.Ordinal),
        Shape.Contains => text.Contains(_literal, StringComparison.Ordinal),
        _ => MatchGeneral(text),
    };

    // Greedy match that, on a mismatch, backs up to the last '%' and lets it swallow one more
    // character; linear in practice and never allocates.
    private bool MatchGeneral(string text)
    {
        var elements = _elements;
        int t = 0, p = 0, starP = -1, starT = 0;
        while (t < text.Length)
        {
            if (p < elements.Length && elements[p].Kind != ElementKind.Many
                && (elements[p].Kind == ElementKind.One || elements[p].Char == text[t]))
            {
                t++;
                p++;
            }
            else if (p < elements.Length && elements[p].Kind == ElementKind.Many)
            {
                starP = p++;
                starT = t;
            }
            else if (starP >= 0)
            {
                p = starP + 1;
                t = ++starT;
            }
            else
            {
                return false;
            }
        }
        while (p < elements.Length && elements[p].Kind == ElementKind.Many)
        {
            p++;
        }
        return p == elements.Length;
    }
}
