-- Farm database, schema version 1.
-- Times are Unix milliseconds (UTC) taken from the database's clock, never a node's.

CREATE TABLE nodes (
    id           INTEGER PRIMARY KEY,
    address      TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    process_id   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
) STRICT;

-- AUTOINCREMENT: a container id names its database file, so an id must never be handed out twice.
CREATE TABLE containers (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    connection_string TEXT    NOT NULL,
    owner_node        INTEGER NULL,
    epoch             INTEGER NOT NULL DEFAULT 0,
    lease_expires_at  INTEGER NULL,
    owned_since       INTEGER NULL
) STRICT;

-- AUTOINCREMENT: container databases key rows by entity id; a reused id would inherit a deleted
-- entity's leftover messages.
CREATE TABLE entities (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT    NOT NULL,
    name_key        TEXT    NOT NULL UNIQUE,
    kind            TEXT    NOT NULL,
    container_id    INTEGER NOT NULL REFERENCES containers (id),
    properties_json TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX entities_by_container ON entities (container_id);
