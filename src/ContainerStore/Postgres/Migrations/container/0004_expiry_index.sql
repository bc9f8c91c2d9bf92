-- Container database, schema version 4 (issue "Bounded memory"). Messages past the message cache
-- stay in the database, and their time to live runs out there too: messages_by_expiry finds the
-- active messages of a queue's main sub-queue whose expiry has passed, earliest first, among
-- millions, so they are deleted or dead-lettered on time without being read into memory. Only rows
-- that can expire are in it, and dead-lettered messages (which keep their expiry) are not.
CREATE INDEX messages_by_expiry ON messages (entity_id, expires_at_ms) WHERE state = 0 AND sub_queue = 0 AND expires_at_ms IS NOT NULL;
