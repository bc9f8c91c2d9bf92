using Xunit.Abstractions;
using Xunit.Sdk;

namespace Farm.ContainerStore.Tests.Contracts;

/// <summary>
/// A contract test: a [Fact] that is skipped, with the reason, when the provider's test class says
/// its database is not there (<see cref="StoreAvailabilityAttribute"/>). The contract's methods are
/// inherited, so the decision has to come from the class they run in, not from the method.
/// </summary>
[XunitTestCaseDiscoverer("Farm.ContainerStore.Tests.Contracts.StoreFactDiscoverer", "Farm.ContainerStore.Tests")]
[AttributeUsage(AttributeTargets.Method)]
public sealed class StoreFactAttribute : FactAttribute;

/// <summary>On a provider's test class: why its contract tests cannot run here, or null when they can.</summary>
[AttributeUsage(AttributeTargets.Class)]
public abstract class StoreAvailabilityAttribute : Attribute
{
    public abstract string? SkipReason { get; }
}

public sealed class StoreFactDiscoverer(IMessageSink diagnosticMessageSink) : FactDiscoverer(diagnosticMessageSink)
{
    public override IEnumerable<IXunitTestCase> Discover(ITestFrameworkDiscoveryOptions discoveryOptions, ITestMethod testMethod, IAttributeInfo factAttribute)
    {
        ArgumentNullException.ThrowIfNull(discoveryOptions);
        ArgumentNullException.ThrowIfNull(testMethod);
        var skipReason = testMethod.TestClass.Class.ToRuntimeType()
            .GetCustomAttributes(typeof(StoreAvailabilityAttribute), inherit: true)
            .Cast<StoreAvailabilityAttribute>()
            .Select(a => a.SkipReason)
            .FirstOrDefault(reason => reason is not null);
        if (skipReason is null)
        {
            return base.Discover(discoveryOptions, testMethod, factAttribute);
        }

        return
        [
            new XunitSkippedDataRowTestCase(
                DiagnosticMessageSink, discoveryOptions.MethodDisplayOrDefault(), discoveryOptions.MethodDisplayOptionsOrDefault(), testMethod, skipReason),
        ];
    }
}
