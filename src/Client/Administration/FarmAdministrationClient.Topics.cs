using System.Runtime.CompilerServices;
using Farm.Contracts.V1;

namespace Farm.Client;

// Topics, named and shaped like Azure's ServiceBusAdministrationClient.
public sealed partial class FarmAdministrationClient
{
    public Task<TopicProperties> CreateTopicAsync(string name, CancellationToken cancellationToken = default)
        => CreateTopicAsync(new CreateTopicOptions(name), cancellationToken);

    /// <summary>Creates a topic; only the properties assigned on <paramref name="options"/> are sent, the rest take the farm's defaults.</summary>
    public async Task<TopicProperties> CreateTopicAsync(CreateTopicOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        var request = new CreateTopicRequest
        {
            Name = options.Name,
            Properties = TopicMapper.ToProto(options, onlyAssigned: true),
            ContainerId = options.ContainerId ?? 0,
        };
        var info = await CallAsync(FarmCalls.CreateTopic, request, options.Name, cancellationToken).ConfigureAwait(false);
        return TopicMapper.FromInfo(info);
    }

    public async Task<TopicProperties> GetTopicAsync(string name, CancellationToken cancellationToken = default)
        => TopicMapper.FromInfo(await GetTopicInfoAsync(name, cancellationToken).ConfigureAwait(false));

    /// <summary>The topic's subscription count, and the messages it stores (once for all subscriptions) with their size.</summary>
    public async Task<TopicRuntimeProperties> GetTopicRuntimePropertiesAsync(string name, CancellationToken cancellationToken = default)
        => TopicMapper.RuntimeFromInfo(await GetTopicInfoAsync(name, cancellationToken).ConfigureAwait(false));

    /// <summary>
    /// Updates the properties assigned on <paramref name="topic"/> since it was fetched (or
    /// created); returns the result. SupportOrdering may be changed on a live topic.
    /// </summary>
    public async Task<TopicProperties> UpdateTopicAsync(TopicProperties topic, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(topic);
        var request = new UpdateTopicRequest { Name = topic.Name, Properties = TopicMapper.ToProto(topic, onlyAssigned: true) };
        var info = await CallAsync(FarmCalls.UpdateTopic, request, topic.Name, cancellationToken).ConfigureAwait(false);
        return TopicMapper.FromInfo(info);
    }

    /// <summary>Deletes the topic, its subscriptions, their rules and every message.</summary>
    public async Task DeleteTopicAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        await CallAsync(FarmCalls.DeleteTopic, new DeleteTopicRequest { Name = name }, name, cancellationToken).ConfigureAwait(false);
    }

    public async Task<bool> TopicExistsAsync(string name, CancellationToken cancellationToken = default)
    {
        try
        {
            await GetTopicInfoAsync(name, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (FarmException e) when (e.Reason == FarmFailureReason.MessagingEntityNotFound)
        {
            return false;
        }
    }

    public async Task<IReadOnlyList<TopicProperties>> ListTopicsAsync(CancellationToken cancellationToken = default)
    {
        var response = await ListTopicInfosAsync(cancellationToken).ConfigureAwait(false);
        return response.Topics.Select(TopicMapper.FromInfo).ToList();
    }

    /// <summary>Every topic with its subscription and message counts, in one call.</summary>
    public async Task<IReadOnlyList<(TopicProperties Properties, TopicRuntimeProperties Runtime)>> ListTopicsWithRuntimePropertiesAsync(CancellationToken cancellationToken = default)
    {
        var response = await ListTopicInfosAsync(cancellationToken).ConfigureAwait(false);
        return response.Topics.Select(t => (TopicMapper.FromInfo(t), TopicMapper.RuntimeFromInfo(t))).ToList();
    }

    /// <summary>Azure-style enumeration of every topic.</summary>
    public async IAsyncEnumerable<TopicProperties> GetTopicsAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        foreach (var topic in await ListTopicsAsync(cancellationToken).ConfigureAwait(false))
        {
            yield return topic;
        }
    }

    public async IAsyncEnumerable<TopicRuntimeProperties> GetTopicsRuntimePropertiesAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        var response = await ListTopicInfosAsync(cancellationToken).ConfigureAwait(false);
        foreach (var topic in response.Topics)
        {
            yield return TopicMapper.RuntimeFromInfo(topic);
        }
    }

    private Task<TopicInfo> GetTopicInfoAsync(string name, CancellationToken cancellationToken)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        return CallAsync(FarmCalls.GetTopic, new GetTopicRequest { Name = name }, name, cancellationToken);
    }

    private Task<ListTopicsResponse> ListTopicInfosAsync(CancellationToken cancellationToken)
        => CallAsync(FarmCalls.ListTopics, new ListTopicsRequest(), null, cancellationToken);
}
