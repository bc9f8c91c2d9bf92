namespace Farm.Cli.Hosting;

/// <summary>The message cache sizes a farm's nodes start with, in MB (null: the node's default): per entity and per node.</summary>
public sealed record MessageCacheSizes(int? PerEntityMb, int? PerNodeMb);
