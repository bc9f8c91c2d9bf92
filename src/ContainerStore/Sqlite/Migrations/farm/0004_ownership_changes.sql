-- Farm database, schema version 4: a record of every change of a container's owner, for the
-- dashboard's timeline. Times are Unix milliseconds from the database's clock, as elsewhere.

-- Who released a container and since when it has had no serving owner, so the take that follows
-- knows a planned move from a failover and how long the container waited. released_at is the
-- release itself, or earlier when the releasing owner had stopped serving before: its lease had run
-- out, or (released_abandoned = 1) it is a crashed process's leftover, released by the node's next
-- process, and released_at is the crashed process's last heartbeat. All three are cleared by a take;
-- NULL (0) on containers released before this version.
ALTER TABLE containers ADD COLUMN released_at INTEGER NULL;
ALTER TABLE containers ADD COLUMN released_by INTEGER NULL;
ALTER TABLE containers ADD COLUMN released_abandoned INTEGER NOT NULL DEFAULT 0;

-- One row per take that raised a container's epoch, written in the take's transaction; the newest
-- 1,000 are kept. from_node is 0 when there was no previous owner (or it is unknown); kind is
-- first, planned, failover or restart (OwnershipChangeKinds); unowned_ms is how long the container
-- had no serving owner before the take, NULL when unknown. AUTOINCREMENT: ids follow the takes'
-- order and are never reused after pruning, so the newest rows are the highest ids.
CREATE TABLE ownership_changes (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    container_id INTEGER NOT NULL,
    epoch        INTEGER NOT NULL,
    from_node    INTEGER NOT NULL,
    to_node      INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    unowned_ms   INTEGER NULL,
    at           INTEGER NOT NULL
) STRICT;
