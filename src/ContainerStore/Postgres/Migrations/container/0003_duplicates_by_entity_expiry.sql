-- Container database, schema version 3. Duplicate detection keeps only the newest MessageIds of an
-- entity in memory (issue "Bounded memory"); a takeover reads those, newest first, through this
-- index, and the older ones are looked up by key when needed.
CREATE INDEX duplicates_by_entity_expiry ON duplicates (entity_id, expires_at_ms);
