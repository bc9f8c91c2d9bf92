-- Farm database, schema version 2: topics, subscriptions and rules.

-- A subscription is an entity whose parent is its topic (same container). Deleting a topic deletes
-- its subscriptions, and deleting a subscription its rules, in the same statement. SQLite enforces
-- both only with foreign_keys = ON, which every connection sets (SqliteSql.ConnectionPragmas).
-- ADD COLUMN ... REFERENCES needs a NULL default: existing entities are all top-level.
ALTER TABLE entities ADD COLUMN parent_id INTEGER NULL REFERENCES entities (id) ON DELETE CASCADE;

CREATE INDEX entities_by_parent ON entities (parent_id);

-- A subscription's filter rules; name_key is the lowercase name, unique per subscription. The
-- unique index also serves the lookups and cascades by subscription. AUTOINCREMENT keeps ids in
-- creation order, which is the order rules are listed (and evaluated) in.
CREATE TABLE rules (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    name            TEXT    NOT NULL,
    name_key        TEXT    NOT NULL,
    definition_json TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    UNIQUE (subscription_id, name_key)
) STRICT;
