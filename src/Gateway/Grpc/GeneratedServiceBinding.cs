using System.Diagnostics.CodeAnalysis;
using System.Reflection;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.AspNetCore.Server.Model;
using Grpc.Core;
using Microsoft.AspNetCore.Routing;

namespace Farm.Gateway.Grpc;

/// <summary>
/// Binds every gRPC service the node maps (Farm's, health, reflection) from the BindService method
/// Grpc.Tools generates, as Grpc.AspNetCore's own binder does, with one difference: a method named
/// in <see cref="ResponseMarshallers"/> answers through Farm's marshaller instead of the generated
/// one. The receive streams' responses splice each delivery's stored bytes in
/// (<see cref="StoredDeliveries"/>), which the generated marshaller, sealed in the generated code,
/// cannot. Grpc.AspNetCore has no hook for a method's marshaller, and a second binder beside its own
/// would map each method twice, so <see cref="GrpcHosting.AddFarmGrpc"/> puts this one in its place.
/// </summary>
internal sealed class GeneratedServiceBinding<[DynamicallyAccessedMembers(DynamicallyAccessedMemberTypes.All)] TService>
    : IServiceMethodProvider<TService> where TService : class
{
    /// <summary>Response marshallers by method (its full name, "/package.Service/Method").</summary>
    private static readonly Dictionary<string, object> ResponseMarshallers = new(StringComparer.Ordinal)
    {
        [$"/{Messaging.Descriptor.FullName}/Receive"] = StoredDeliveries.ReceiveResponseMarshaller,
        [$"/{Messaging.Descriptor.FullName}/ReceiveSession"] = StoredDeliveries.ReceiveSessionResponseMarshaller,
    };

    public void OnServiceMethodDiscovery(ServiceMethodProviderContext<TService> context)
    {
        for (var type = typeof(TService); type is not null; type = type.BaseType)
        {
            if (type.GetCustomAttribute<BindServiceMethodAttribute>(inherit: false) is not { } bind)
            {
                continue;
            }
            var bindService = bind.BindType.GetMethod(
                bind.BindMethodName, BindingFlags.Public | BindingFlags.Static, [typeof(ServiceBinderBase), type])
                ?? throw new InvalidOperationException($"{bind.BindType} has no {bind.BindMethodName}(ServiceBinderBase, {type.Name}).");
            // With no implementation the generated code hands over each method's description only.
            bindService.Invoke(null, [new Binder(context), null]);
            return;
        }
    }

    /// <summary>Its own marshaller for a method named in <see cref="ResponseMarshallers"/>; otherwise the method as generated.</summary>
    private static Method<TRequest, TResponse> WithFarmMarshallers<TRequest, TResponse>(Method<TRequest, TResponse> method) =>
        ResponseMarshallers.TryGetValue(method.FullName, out var marshaller) && marshaller is Marshaller<TResponse> response
            ? new Method<TRequest, TResponse>(method.Type, method.ServiceName, method.Name, method.RequestMarshaller, response)
            : method;

    /// <summary>Turns each method the generated code describes into an endpoint calling the service's override of it.</summary>
    private sealed class Binder(ServiceMethodProviderContext<TService> context) : ServiceBinderBase
    {
        public override void AddMethod<TRequest, TResponse>(Method<TRequest, TResponse> method, UnaryServerMethod<TRequest, TResponse>? handler)
        {
            var (invoker, metadata) = Handler<UnaryServerMethod<TService, TRequest, TResponse>>(method.Name, typeof(TRequest), typeof(ServerCallContext));
            context.AddUnaryMethod(WithFarmMarshallers(method), metadata, invoker);
        }

        public override void AddMethod<TRequest, TResponse>(Method<TRequest, TResponse> method, ClientStreamingServerMethod<TRequest, TResponse>? handler)
        {
            var (invoker, metadata) = Handler<ClientStreamingServerMethod<TService, TRequest, TResponse>>(
                method.Name, typeof(IAsyncStreamReader<TRequest>), typeof(ServerCallContext));
            context.AddClientStreamingMethod(WithFarmMarshallers(method), metadata, invoker);
        }

        public override void AddMethod<TRequest, TResponse>(Method<TRequest, TResponse> method, ServerStreamingServerMethod<TRequest, TResponse>? handler)
        {
            var (invoker, metadata) = Handler<ServerStreamingServerMethod<TService, TRequest, TResponse>>(
                method.Name, typeof(TRequest), typeof(IServerStreamWriter<TResponse>), typeof(ServerCallContext));
            context.AddServerStreamingMethod(WithFarmMarshallers(method), metadata, invoker);
        }

        public override void AddMethod<TRequest, TResponse>(Method<TRequest, TResponse> method, DuplexStreamingServerMethod<TRequest, TResponse>? handler)
        {
            var (invoker, metadata) = Handler<DuplexStreamingServerMethod<TService, TRequest, TResponse>>(
                method.Name, typeof(IAsyncStreamReader<TRequest>), typeof(IServerStreamWriter<TResponse>), typeof(ServerCallContext));
            context.AddDuplexStreamingMethod(WithFarmMarshallers(method), metadata, invoker);
        }

        /// <summary>
        /// A delegate calling the service's public method of that name and parameters (the override of
        /// the generated base's), and the endpoint's metadata: the service's attributes, then the
        /// method's, then POST as the only HTTP method (a CORS preflight reaches gRPC, which refuses it).
        /// </summary>
        private static (TDelegate Invoker, List<object> Metadata) Handler<TDelegate>(string name, params Type[] parameters)
            where TDelegate : Delegate
        {
            var method = typeof(TService).GetMethod(name, BindingFlags.Public | BindingFlags.Instance, parameters)
                ?? throw new InvalidOperationException($"{typeof(TService)} has no public method {name}.");
            var metadata = new List<object>();
            metadata.AddRange(typeof(TService).GetCustomAttributes(inherit: true));
            metadata.AddRange(method.GetCustomAttributes(inherit: true));
            metadata.Add(new HttpMethodMetadata(["POST"], acceptCorsPreflight: true));
            return ((TDelegate)Delegate.CreateDelegate(typeof(TDelegate), method), metadata);
        }
    }
}
