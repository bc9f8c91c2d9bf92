using Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>
/// The farm's shared access policies: what clients of the AMQP front door sign their
/// SharedAccessSignature tokens with. Every farm starts with RootManageSharedAccessKey
/// (Manage, Send, Listen); the farm refuses to delete its last policy with Manage.
/// </summary>
public sealed partial class FarmAdministrationClient
{
    /// <summary>
    /// Creates a policy with two new random keys. Manage brings Send and Listen with it. The name:
    /// 1 to 256 letters, digits, '.', '-' and '_', case-sensitive.
    /// </summary>
    public async Task<SharedAccessPolicyProperties> CreateSharedAccessPolicyAsync(string name, AccessRights rights, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        if (rights == AccessRights.None || (rights & ~(AccessRights.Manage | AccessRights.Send | AccessRights.Listen)) != 0)
        {
            throw new ArgumentOutOfRangeException(nameof(rights), rights, "A shared access policy needs at least one of Manage, Send and Listen.");
        }
        var request = new CreateAccessPolicyRequest { Name = name };
        request.Rights.AddRange(AccessPolicyMapper.ToProto(rights));
        var info = await CallAsync(FarmCalls.CreateAccessPolicy, request, null, cancellationToken).ConfigureAwait(false);
        return AccessPolicyMapper.FromProto(info);
    }

    /// <summary>Every policy of the farm, by name, with its keys.</summary>
    public async Task<IReadOnlyList<SharedAccessPolicyProperties>> GetSharedAccessPoliciesAsync(CancellationToken cancellationToken = default)
    {
        var response = await CallAsync(FarmCalls.ListAccessPolicies, new ListAccessPoliciesRequest(), null, cancellationToken).ConfigureAwait(false);
        return response.Policies.Select(AccessPolicyMapper.FromProto).ToList();
    }

    /// <summary>Deletes a policy: tokens signed with its keys stop working. Refused for the farm's last policy with Manage.</summary>
    public async Task DeleteSharedAccessPolicyAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        await CallAsync(FarmCalls.DeleteAccessPolicy, new DeleteAccessPolicyRequest { Name = name }, null, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Replaces one key of the policy with a new random one and returns the policy; tokens signed
    /// with the other key keep working, so clients can move to the new key first.
    /// </summary>
    public async Task<SharedAccessPolicyProperties> RenewSharedAccessKeyAsync(string name, SharedAccessKeyType key, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        var request = new RenewAccessPolicyKeyRequest
        {
            Name = name,
            Key = key switch
            {
                SharedAccessKeyType.PrimaryKey => AccessKeyKind.Primary,
                SharedAccessKeyType.SecondaryKey => AccessKeyKind.Secondary,
                _ => throw new ArgumentOutOfRangeException(nameof(key), key, "Renew the PrimaryKey or the SecondaryKey."),
            },
        };
        var info = await CallAsync(FarmCalls.RenewAccessPolicyKey, request, null, cancellationToken).ConfigureAwait(false);
        return AccessPolicyMapper.FromProto(info);
    }
}

/// <summary>Shared access policies to and from farm.v1.AccessPolicyInfo.</summary>
internal static class AccessPolicyMapper
{
    public static IEnumerable<AccessRight> ToProto(AccessRights rights)
    {
        if (rights.HasFlag(AccessRights.Manage))
        {
            yield return AccessRight.Manage;
        }
        if (rights.HasFlag(AccessRights.Send))
        {
            yield return AccessRight.Send;
        }
        if (rights.HasFlag(AccessRights.Listen))
        {
            yield return AccessRight.Listen;
        }
    }

    public static SharedAccessPolicyProperties FromProto(AccessPolicyInfo info) => new()
    {
        Name = info.Name,
        Rights = info.Rights.Aggregate(AccessRights.None, (all, right) => all | right switch
        {
            AccessRight.Manage => AccessRights.Manage,
            AccessRight.Send => AccessRights.Send,
            AccessRight.Listen => AccessRights.Listen,
            _ => AccessRights.None,
        }),
        PrimaryKey = info.PrimaryKey,
        SecondaryKey = info.SecondaryKey,
        CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
        UpdatedAt = info.UpdatedAt?.ToDateTimeOffset() ?? default,
    };
}
