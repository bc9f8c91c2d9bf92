using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Administration;

/// <summary>
/// The farm's shared access policies (farm.v1.Management's *AccessPolicy* calls): names and keys in
/// the farm database, run on any node. Keys are made here, never taken from a caller, so every key
/// is 32 random bytes. A delete that would leave no policy with Manage is refused, so the farm can
/// always be administered.
/// </summary>
public sealed partial class EntityAdministration
{
    /// <summary>The longest policy name, as Azure allows for a SharedAccessKeyName.</summary>
    public const int MaxAccessPolicyNameLength = 256;

    public async Task<AccessPolicyInfo> CreateAccessPolicyAsync(string name, IEnumerable<AccessRight> rights, CancellationToken ct)
    {
        RequireValidPolicyName(name);
        var wanted = RightsOf(rights);
        var created = await Farm.CreateAccessPolicyAsync(name, wanted, AccessPolicies.NewKey(), AccessPolicies.NewKey(), ct).ConfigureAwait(false)
            ?? throw FarmErrors.Create(FarmErrorCode.MessagingEntityAlreadyExists, $"This farm already has a shared access policy named '{name}'.");
        return DescribeAccessPolicy(created);
    }

    public async Task<IReadOnlyList<AccessPolicyInfo>> ListAccessPoliciesAsync(CancellationToken ct) =>
        [.. (await Farm.ListAccessPoliciesAsync(ct).ConfigureAwait(false)).Select(DescribeAccessPolicy)];

    public async Task DeleteAccessPolicyAsync(string name, CancellationToken ct)
    {
        RequireValidPolicyName(name);
        bool deleted;
        try
        {
            deleted = await Farm.DeleteAccessPolicyAsync(name, ct).ConfigureAwait(false);
        }
        catch (LastManageAccessPolicyException e)
        {
            throw FarmErrors.Invalid(e.Message);
        }
        if (!deleted)
        {
            throw AccessPolicyNotFound(name);
        }
    }

    /// <summary>Replaces the primary or the secondary key with a new one; the other stays, so clients can move over.</summary>
    public async Task<AccessPolicyInfo> RenewAccessPolicyKeyAsync(string name, AccessKeyKind key, CancellationToken ct)
    {
        RequireValidPolicyName(name);
        if (key is not (AccessKeyKind.Primary or AccessKeyKind.Secondary))
        {
            throw FarmErrors.Invalid("Say which key to renew: primary or secondary.");
        }
        var policy = await Farm.GetAccessPolicyAsync(name, ct).ConfigureAwait(false) ?? throw AccessPolicyNotFound(name);
        var renewed = key == AccessKeyKind.Primary
            ? await Farm.UpdateAccessPolicyKeysAsync(name, AccessPolicies.NewKey(), policy.SecondaryKey, ct).ConfigureAwait(false)
            : await Farm.UpdateAccessPolicyKeysAsync(name, policy.PrimaryKey, AccessPolicies.NewKey(), ct).ConfigureAwait(false);
        return DescribeAccessPolicy(renewed ?? throw AccessPolicyNotFound(name));
    }

    /// <summary>Null when valid; otherwise why not, in one line. Names as Azure allows them: letters, digits, '.', '-', '_'.</summary>
    public static string? ValidateAccessPolicyName(string? name)
    {
        if (string.IsNullOrEmpty(name))
        {
            return "A shared access policy name is required.";
        }
        if (name.Length > MaxAccessPolicyNameLength)
        {
            return $"The shared access policy name '{name[..20]}...' is {name.Length} characters long; the maximum is {MaxAccessPolicyNameLength}.";
        }
        if (!name.All(c => char.IsAsciiLetterOrDigit(c) || c is '.' or '-' or '_'))
        {
            return $"The shared access policy name '{name}' is invalid: use letters, digits, '.', '-' and '_'.";
        }
        return null;
    }

    private static void RequireValidPolicyName(string? name)
    {
        if (ValidateAccessPolicyName(name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
    }

    private static AccessRights RightsOf(IEnumerable<AccessRight> rights)
    {
        var result = AccessRights.None;
        foreach (var right in rights)
        {
            result |= right switch
            {
                AccessRight.Manage => AccessRights.Manage,
                AccessRight.Send => AccessRights.Send,
                AccessRight.Listen => AccessRights.Listen,
                _ => throw FarmErrors.Invalid($"'{right}' is not an access right: use Manage, Send or Listen."),
            };
        }
        return result == AccessRights.None
            ? throw FarmErrors.Invalid("A shared access policy needs at least one right: Manage, Send or Listen.")
            : AccessPolicies.Normalize(result);
    }

    private static BrokerException AccessPolicyNotFound(string name) =>
        FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound, $"This farm has no shared access policy named '{name}' (names are case-sensitive).");

    private static AccessPolicyInfo DescribeAccessPolicy(AccessPolicyRecord policy)
    {
        var info = new AccessPolicyInfo
        {
            Name = policy.Name,
            PrimaryKey = policy.PrimaryKey,
            SecondaryKey = policy.SecondaryKey,
            CreatedAt = Timestamp.FromDateTimeOffset(policy.CreatedAt),
            UpdatedAt = Timestamp.FromDateTimeOffset(policy.UpdatedAt),
        };
        foreach (var (flag, right) in (ReadOnlySpan<(AccessRights, AccessRight)>)[(AccessRights.Manage, AccessRight.Manage), (AccessRights.Send, AccessRight.Send), (AccessRights.Listen, AccessRight.Listen)])
        {
            if (policy.Rights.HasFlag(flag))
            {
                info.Rights.Add(right);
            }
        }
        return info;
    }
}
