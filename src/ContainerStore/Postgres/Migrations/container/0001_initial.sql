-- Container database, schema version 1. Message times are Unix milliseconds (UTC) set by the broker.

-- The owner epoch: every write transaction locks and checks it, a new owner raises it before it serves.
CREATE TABLE owner (
    id    integer PRIMARY KEY CHECK (id = 1),
    epoch bigint  NOT NULL
);

INSERT INTO owner (id, epoch) VALUES (1, 0);

CREATE TABLE entity_state (
    entity_id     bigint PRIMARY KEY,
    next_sequence bigint NOT NULL
);

CREATE TABLE messages (
    entity_id       bigint  NOT NULL,
    sequence_number bigint  NOT NULL,
    sub_queue       integer NOT NULL,
    state           integer NOT NULL,
    delivery_count  integer NOT NULL,
    enqueued_at_ms  bigint  NOT NULL,
    scheduled_at_ms bigint  NULL,
    expires_at_ms   bigint  NULL,
    message_id      text    NULL,
    dl_reason       text    NULL,
    dl_description  text    NULL,
    dl_source       text    NULL,
    payload         bytea   NULL,
    payload_size    integer NOT NULL,
    PRIMARY KEY (entity_id, sequence_number)
);

-- "C": duplicate detection compares MessageIds byte for byte, whatever the server's locale.
CREATE TABLE duplicates (
    entity_id     bigint NOT NULL,
    message_id    text   COLLATE "C" NOT NULL,
    expires_at_ms bigint NOT NULL,
    PRIMARY KEY (entity_id, message_id)
);

CREATE INDEX duplicates_by_expiry ON duplicates (expires_at_ms);
