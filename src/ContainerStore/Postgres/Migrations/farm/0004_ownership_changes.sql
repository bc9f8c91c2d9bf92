-- Farm database, schema version 4: a record of every change of a container's owner, for the
-- dashboard's timeline. Times are timestamptz from the server's clock, as elsewhere.

-- Who released a container and since when it has had no serving owner, so the take that follows
-- knows a planned move from a failover and how long the container waited. released_at is the
-- release itself, or earlier when the releasing owner had stopped serving before: its lease had run
-- out, or (released_abandoned) it is a crashed process's leftover, released by the node's next
-- process, and released_at is the crashed process's last heartbeat. All three are cleared by a take;
-- NULL (false) on containers released before this version.
ALTER TABLE containers ADD COLUMN released_at timestamptz NULL;
ALTER TABLE containers ADD COLUMN released_by bigint NULL;
ALTER TABLE containers ADD COLUMN released_abandoned boolean NOT NULL DEFAULT false;

-- One row per take that raised a container's epoch, written in the take's transaction; the newest
-- 1,000 are kept. from_node is 0 when there was no previous owner (or it is unknown); kind is
-- first, planned, failover or restart (OwnershipChangeKinds); unowned_ms is how long the container
-- had no serving owner before the take, NULL when unknown. The identity never hands an id out
-- twice, so the newest rows are the highest ids.
CREATE TABLE ownership_changes (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    container_id bigint      NOT NULL,
    epoch        bigint      NOT NULL,
    from_node    bigint      NOT NULL,
    to_node      bigint      NOT NULL,
    kind         text        NOT NULL,
    unowned_ms   bigint      NULL,
    at           timestamptz NOT NULL
);
