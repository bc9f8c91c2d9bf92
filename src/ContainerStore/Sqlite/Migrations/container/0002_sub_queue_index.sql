-- Container database, schema version 2. The broker keeps only the head of a deep queue in memory
-- and reads the rest back in sequence order as the head drains (issue "Bounded memory"). This
-- index finds a sub-queue's active messages after a sequence number, and counts them with their
-- sizes, without reading the rows and their payloads; it also finds the few scheduled and
-- deferred messages among millions of active ones.
CREATE INDEX messages_by_sub_queue ON messages (entity_id, sub_queue, state, sequence_number, payload_size);
