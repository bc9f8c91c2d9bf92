using Farm.ContainerStore.Containers;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// Maps a row of <see cref="SqliteSql.ContainerDb.LoadMessages"/> by ordinal. Loading a container
/// can read millions of rows, so this skips Dapper's per-column name lookups.
/// </summary>
internal static class SqliteMessageReader
{
    public static MessageRecord Read(SqliteDataReader reader) => new()
    {
        EntityId = reader.GetInt64(0),
        SequenceNumber = reader.GetInt64(1),
        SubQueue = (SubQueue)reader.GetInt64(2),
        State = (StoredMessageState)reader.GetInt64(3),
        DeliveryCount = reader.GetInt32(4),
        EnqueuedAtMs = reader.GetInt64(5),
        ScheduledAtMs = reader.IsDBNull(6) ? null : reader.GetInt64(6),
        ExpiresAtMs = reader.IsDBNull(7) ? null : reader.GetInt64(7),
        MessageId = reader.IsDBNull(8) ? null : reader.GetString(8),
        DeadLetterReason = reader.IsDBNull(9) ? null : reader.GetString(9),
        DeadLetterDescription = reader.IsDBNull(10) ? null : reader.GetString(10),
        DeadLetterSource = reader.IsDBNull(11) ? null : reader.GetString(11),
        Payload = reader.IsDBNull(12) ? null : (byte[])reader.GetValue(12),
        PayloadSize = reader.GetInt32(13),
        StoredAlone = reader.FieldCount > 14 && reader.GetInt64(14) != 0,
    };
}
