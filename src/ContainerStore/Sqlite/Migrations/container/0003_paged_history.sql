-- Container database, schema version 3 (issue "Bounded memory"). Duplicate detection keeps only
-- the newest MessageIds of an entity in memory: a takeover reads those, newest first, through
-- duplicates_by_entity_expiry, and the older ones are looked up by key when needed. Scheduled
-- messages past the message cache stay in the database: messages_by_due_time finds the next ones
-- to come due, in order, among millions of active messages.
CREATE INDEX duplicates_by_entity_expiry ON duplicates (entity_id, expires_at_ms);
CREATE INDEX messages_by_due_time ON messages (entity_id, scheduled_at_ms, sequence_number) WHERE state = 2;
