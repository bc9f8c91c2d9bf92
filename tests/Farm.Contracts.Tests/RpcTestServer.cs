using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using Farm.Broker.Rpc;
using Farm.Contracts.Rpc;
using Farm.Contracts.V1;
using Google.Protobuf;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.Extensions.Logging;

namespace Farm.Contracts.Tests;

/// <summary>
/// A real Kestrel on a loopback port with test handlers on farm.v1 methods. The entity name picks
/// the behaviour ("echo", "fail", "wait:{id}", ...), so one server serves every test of a class.
/// </summary>
public sealed class RpcTestServer : IAsyncLifetime
{
    public const string PeekMethod = "/farm.v1.Messaging/Peek";
    public const string ReceiveMethod = "/farm.v1.Messaging/Receive";

    private WebApplication? _app;

    public Uri Address { get; private set; } = null!;

    public RpcChannel Channel { get; private set; } = null!;

    public CapturingLoggerProvider Logs { get; } = new();

    /// <summary>Completed when a handler for "wait:{id}" or "hold:{id}" started.</summary>
    public ConcurrentDictionary<string, TaskCompletionSource> Started { get; } = new();

    /// <summary>Completed when a handler for "wait:{id}" or "hold:{id}" saw its call cancelled.</summary>
    public ConcurrentDictionary<string, TaskCompletionSource> Cancelled { get; } = new();

    public Task WhenStarted(string entity) => Signal(Started, entity).Task;

    public Task WhenCancelled(string entity) => Signal(Cancelled, entity).Task;

    public async Task InitializeAsync()
    {
        var builder = WebApplication.CreateSlimBuilder();
        builder.Logging.ClearProviders().AddProvider(Logs).SetMinimumLevel(LogLevel.Debug);
        builder.WebHost.ConfigureKestrel(kestrel => kestrel.ListenGrpc(IPAddress.Loopback, 0));
        _app = builder.Build();

        _app.MapUnary<PeekRequest, PeekResponse>(PeekMethod, PeekRequest.Parser, PeekAsync);
        _app.MapDuplex<ReceiveRequest, ReceiveResponse>(ReceiveMethod, ReceiveRequest.Parser, ReceiveAsync);
        _app.MapRpcFallbackAndReflection(MessagingReflection.Descriptor, ManagementReflection.Descriptor, MessagesReflection.Descriptor);

        await _app.StartAsync();
        Address = new Uri(_app.Urls.Single());
        Channel = new RpcChannel(Address);
    }

    public async Task DisposeAsync()
    {
        Channel.Dispose();
        if (_app is not null)
        {
            await _app.DisposeAsync();
        }
    }

    private async Task<PeekResponse> PeekAsync(PeekRequest request, RpcCallContext context)
    {
        var kind = request.Entity.Split(':')[0];
        switch (kind)
        {
            case "fail":
                context.ResponseTrailers["farm-owner"] = "broker-2";
                throw new RpcException(RpcStatusCode.NotFound, "Entity 'fail' not found: 100% gone, naïve ✓",
                    new Dictionary<string, string> { [RpcException.FarmErrorTrailer] = "FARM_ERROR_ENTITY_NOT_FOUND" });
            case "crash":
                throw new InvalidOperationException("boom");
            case "wait":
                await WaitForCancellationAsync(request.Entity, context.CancellationToken);
                throw new UnreachableException();
            case "big":
                return new PeekResponse { Messages = { NewMessage(1, ByteString.CopyFrom(new byte[request.FromSequenceNumber])) } };
            case "header":
                return new PeekResponse { Messages = { NewMessage(1, ByteString.CopyFromUtf8(context.GetHeader("x-test") ?? "")) } };
            default:
                var response = new PeekResponse();
                for (var i = 0; i < request.MaxMessages; i++)
                {
                    response.Messages.Add(NewMessage(request.FromSequenceNumber + i, ByteString.CopyFromUtf8(request.Entity)));
                }

                return response;
        }
    }

    /// <summary>Pushes one message per unit of credit, numbered from 1, until the client half-closes.</summary>
    private async Task ReceiveAsync(IAsyncEnumerable<ReceiveRequest> requests, IRpcStreamWriter<ReceiveResponse> writer, RpcCallContext context)
    {
        var entity = "";
        var sequence = 0L;
        await foreach (var request in requests)
        {
            int credit;
            if (request.KindCase == ReceiveRequest.KindOneofCase.Open)
            {
                entity = request.Open.Entity;
                credit = request.Open.Credit;
                if (entity.StartsWith("hold:", StringComparison.Ordinal))
                {
                    await WaitForCancellationAsync(entity, context.CancellationToken);
                }
            }
            else
            {
                credit = request.Credit;
            }

            for (var i = 0; i < credit; i++)
            {
                await writer.WriteAsync(new ReceiveResponse { Messages = { NewMessage(++sequence, ByteString.CopyFromUtf8(entity)) } });
                if (entity == "fail-after-one")
                {
                    context.ResponseTrailers["farm-owner"] = "broker-3";
                    throw new RpcException(RpcStatusCode.FailedPrecondition, "Not the owner any more.",
                        new Dictionary<string, string> { [RpcException.FarmErrorTrailer] = "FARM_ERROR_NOT_OWNER" });
                }
            }
        }
    }

    private async Task WaitForCancellationAsync(string entity, CancellationToken cancellationToken)
    {
        Signal(Started, entity).TrySetResult();
        try
        {
            await Task.Delay(Timeout.Infinite, cancellationToken);
        }
        finally
        {
            Signal(Cancelled, entity).TrySetResult();
        }
    }

    private static TaskCompletionSource Signal(ConcurrentDictionary<string, TaskCompletionSource> signals, string entity) =>
        signals.GetOrAdd(entity, _ => new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously));

    private static ReceivedMessage NewMessage(long sequenceNumber, ByteString body) =>
        new() { SequenceNumber = sequenceNumber, Message = new Message { Body = body } };
}

public sealed class CapturingLoggerProvider : ILoggerProvider
{
    public ConcurrentQueue<(string Category, LogLevel Level, EventId EventId, string Message, Exception? Exception)> Entries { get; } = new();

    public ILogger CreateLogger(string categoryName) => new Logger(this, categoryName);

    public void Dispose()
    {
    }

    private sealed class Logger(CapturingLoggerProvider provider, string category) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => true;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
            provider.Entries.Enqueue((category, logLevel, eventId, formatter(state, exception), exception));
    }
}
