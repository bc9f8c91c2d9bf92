-- Container database, schema version 7 (issue "Performance": fan-out). The same columns and table as
-- the SQLite schema's version 7, which explains them: subscriptions that follow their topic without
-- rows of their own (a membership per copy, a done mark per subscription, tombstones in state 3).
ALTER TABLE entity_state ADD COLUMN follower_slot integer NULL;
ALTER TABLE entity_state ADD COLUMN follow_from bigint NULL;
ALTER TABLE entity_state ADD COLUMN done_through bigint NOT NULL DEFAULT 0;

CREATE TABLE copy_members (
    topic_id        bigint NOT NULL,
    sequence_number bigint NOT NULL,
    members         bytea  NOT NULL,
    PRIMARY KEY (topic_id, sequence_number)
);
