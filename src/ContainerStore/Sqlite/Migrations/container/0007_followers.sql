-- Container database, schema version 7 (issue "Performance": fan-out). A subscription that gets a
-- topic's message unchanged while it holds the message in memory writes no row of its own for it:
-- the topic's copy names the subscriptions that got it this way (copy_members, a bit per
-- subscription at the position its topic gave it, follower_slot). Such an implicit message is the
-- subscription's while its sequence number is at or above follow_from (when the subscription took
-- its slot) and above done_through (every implicit message at or below it was settled), unless the
-- subscription has a row at that sequence number: a row of its own (written once the message is
-- changed: redelivered, deferred, dead-lettered) or a tombstone (state 3: completed out of order,
-- deleted once done_through passes it).
ALTER TABLE entity_state ADD COLUMN follower_slot INTEGER NULL;
ALTER TABLE entity_state ADD COLUMN follow_from INTEGER NULL;
ALTER TABLE entity_state ADD COLUMN done_through INTEGER NOT NULL DEFAULT 0;

-- Kept apart from the copy's row: the copy scan reads it for every copy, and a column after a large
-- payload would make SQLite walk the payload's overflow pages to reach it.
CREATE TABLE copy_members (
    topic_id        INTEGER NOT NULL,
    sequence_number INTEGER NOT NULL,
    members         BLOB    NOT NULL,
    PRIMARY KEY (topic_id, sequence_number)
) WITHOUT ROWID, STRICT;
