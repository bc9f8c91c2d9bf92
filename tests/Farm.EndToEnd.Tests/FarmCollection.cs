namespace Farm.EndToEnd.Tests;

/// <summary>
/// The end-to-end tests start real node processes; they run one at a time so that on a 2-core
/// machine each farm starts within its deadline and a failure points at one test.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class FarmCollection
{
    public const string Name = "Real farm processes";
}
