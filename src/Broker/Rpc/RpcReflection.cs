using Farm.Contracts.Reflection.V1Alpha;
using Google.Protobuf.Reflection;

namespace Farm.Broker.Rpc;

/// <summary>
/// gRPC server reflection (grpc.reflection.v1alpha and v1): which services this server offers,
/// and the descriptors of the .proto files that define them, for tools like grpcurl.
/// </summary>
internal sealed class RpcReflection
{
    public const string V1AlphaMethod = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
    public const string V1Method = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";

    private const int NotFound = 5;
    private const int InvalidArgument = 3;

    private readonly List<string> _services = [];
    private readonly Dictionary<string, FileDescriptor> _filesByName = [];
    private readonly Dictionary<string, FileDescriptor> _filesBySymbol = [];

    public RpcReflection(IEnumerable<FileDescriptor> files)
    {
        FileDescriptor[] offered = [.. files, ReflectionReflection.Descriptor, Farm.Contracts.Reflection.V1.ReflectionReflection.Descriptor];
        foreach (var file in offered)
        {
            _services.AddRange(file.Services.Select(s => s.FullName));
            Add(file);
        }
    }

    public IReadOnlyList<string> Services => _services;

    public async Task ServeAsync(IAsyncEnumerable<ServerReflectionRequest> requests, IRpcStreamWriter<ServerReflectionResponse> writer, CancellationToken cancellationToken)
    {
        await foreach (var request in requests.WithCancellation(cancellationToken))
        {
            await writer.WriteAsync(Answer(request), cancellationToken);
        }
    }

    public ServerReflectionResponse Answer(ServerReflectionRequest request)
    {
        var response = new ServerReflectionResponse { ValidHost = request.Host, OriginalRequest = request };
        switch (request.MessageRequestCase)
        {
            case ServerReflectionRequest.MessageRequestOneofCase.ListServices:
                response.ListServicesResponse = new ListServiceResponse();
                response.ListServicesResponse.Service.AddRange(_services.Select(name => new ServiceResponse { Name = name }));
                break;
            case ServerReflectionRequest.MessageRequestOneofCase.FileByFilename:
                SetFile(response, _filesByName.GetValueOrDefault(request.FileByFilename), $"File not found: {request.FileByFilename}");
                break;
            case ServerReflectionRequest.MessageRequestOneofCase.FileContainingSymbol:
                SetFile(response, _filesBySymbol.GetValueOrDefault(request.FileContainingSymbol), $"Symbol not found: {request.FileContainingSymbol}");
                break;
            case ServerReflectionRequest.MessageRequestOneofCase.AllExtensionNumbersOfType:
                // Farm's contract is proto3, which has no extensions: a known type has none.
                if (_filesBySymbol.ContainsKey(request.AllExtensionNumbersOfType))
                {
                    response.AllExtensionNumbersResponse = new ExtensionNumberResponse { BaseTypeName = request.AllExtensionNumbersOfType };
                }
                else
                {
                    response.ErrorResponse = Error(NotFound, $"Type not found: {request.AllExtensionNumbersOfType}");
                }

                break;
            case ServerReflectionRequest.MessageRequestOneofCase.FileContainingExtension:
                response.ErrorResponse = Error(NotFound, $"Extension not found: {request.FileContainingExtension.ContainingType}({request.FileContainingExtension.ExtensionNumber})");
                break;
            default:
                response.ErrorResponse = Error(InvalidArgument, "Empty reflection request.");
                break;
        }

        return response;
    }

    private static void SetFile(ServerReflectionResponse response, FileDescriptor? file, string notFound)
    {
        if (file is null)
        {
            response.ErrorResponse = Error(NotFound, notFound);
            return;
        }

        // The file first, then everything it imports, so the client can build it without asking again.
        var result = new FileDescriptorResponse();
        var seen = new HashSet<string>();
        var pending = new Queue<FileDescriptor>([file]);
        while (pending.TryDequeue(out var next))
        {
            if (seen.Add(next.Name))
            {
                result.FileDescriptorProto.Add(next.SerializedData);
                foreach (var dependency in next.Dependencies)
                {
                    pending.Enqueue(dependency);
                }
            }
        }

        response.FileDescriptorResponse = result;
    }

    private static ErrorResponse Error(int code, string message) => new() { ErrorCode = code, ErrorMessage = message };

    private void Add(FileDescriptor file)
    {
        if (!_filesByName.TryAdd(file.Name, file))
        {
            return;
        }

        foreach (var service in file.Services)
        {
            _filesBySymbol[service.FullName] = file;
            foreach (var method in service.Methods)
            {
                _filesBySymbol[method.FullName] = file;
            }
        }

        foreach (var message in file.MessageTypes)
        {
            AddMessage(message, file);
        }

        foreach (var enumType in file.EnumTypes)
        {
            _filesBySymbol[enumType.FullName] = file;
        }

        foreach (var dependency in file.Dependencies)
        {
            Add(dependency);
        }
    }

    private void AddMessage(MessageDescriptor message, FileDescriptor file)
    {
        _filesBySymbol[message.FullName] = file;
        foreach (var nested in message.NestedTypes)
        {
            AddMessage(nested, file);
        }

        foreach (var enumType in message.EnumTypes)
        {
            _filesBySymbol[enumType.FullName] = file;
        }
    }
}
