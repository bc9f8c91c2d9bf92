-- Container database, schema version 6 (issue "Performance"). A peek-lock delivery is counted
-- durably before the message is handed out. Most deliveries are first deliveries taken in sequence
-- order, so instead of rewriting each message's row, the broker stores one mark per entity with the
-- delivery: every message of the main queue at or below delivered_through that was never scheduled
-- has been delivered at least once, and a row there whose delivery_count is 0 reads as 1. Redeliveries,
-- scheduled messages and dead letters still write their count into their row.
ALTER TABLE entity_state ADD COLUMN delivered_through bigint NOT NULL DEFAULT 0;
