-- Container database, schema version 1. Times are Unix milliseconds (UTC).

-- The owner epoch: every write transaction checks it, a new owner raises it before it serves.
CREATE TABLE owner (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
) STRICT;

INSERT INTO owner (id, epoch) VALUES (1, 0);

CREATE TABLE entity_state (
    entity_id     INTEGER PRIMARY KEY,
    next_sequence INTEGER NOT NULL
) STRICT;

CREATE TABLE messages (
    entity_id       INTEGER NOT NULL,
    sequence_number INTEGER NOT NULL,
    sub_queue       INTEGER NOT NULL,
    state           INTEGER NOT NULL,
    delivery_count  INTEGER NOT NULL,
    enqueued_at_ms  INTEGER NOT NULL,
    scheduled_at_ms INTEGER NULL,
    expires_at_ms   INTEGER NULL,
    message_id      TEXT    NULL,
    dl_reason       TEXT    NULL,
    dl_description  TEXT    NULL,
    dl_source       TEXT    NULL,
    payload         BLOB    NULL,
    payload_size    INTEGER NOT NULL,
    PRIMARY KEY (entity_id, sequence_number)
) STRICT;

-- Small rows looked up by key only: WITHOUT ROWID saves the separate primary-key index.
CREATE TABLE duplicates (
    entity_id     INTEGER NOT NULL,
    message_id    TEXT    NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (entity_id, message_id)
) WITHOUT ROWID, STRICT;

CREATE INDEX duplicates_by_expiry ON duplicates (expires_at_ms);
