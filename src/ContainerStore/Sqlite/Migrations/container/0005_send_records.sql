-- Container database, schema version 5 (issue "Performance": failover). A send a client named
-- (producer, send id) is recorded in the commit that stores its messages, with the sequence
-- numbers it was answered with (8 bytes each, little-endian): a repeat of the send whose answer
-- was lost in a failover reaches the new owner, which finds it here by key and answers it the
-- same instead of storing the messages a second time. Records are pruned after a few minutes
-- through send_records_by_time.
CREATE TABLE send_records (
    producer_id      TEXT    NOT NULL,
    send_id          INTEGER NOT NULL,
    entity_id        INTEGER NOT NULL,
    sequence_numbers BLOB    NOT NULL,
    at_ms            INTEGER NOT NULL,
    PRIMARY KEY (producer_id, send_id)
) WITHOUT ROWID;
CREATE INDEX send_records_by_time ON send_records (at_ms);
