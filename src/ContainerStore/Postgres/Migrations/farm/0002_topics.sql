-- Farm database, schema version 2: topics, subscriptions and rules.

-- A subscription is an entity whose parent is its topic (same container). Deleting a topic deletes
-- its subscriptions, and deleting a subscription its rules, in the same statement. Existing
-- entities are all top-level (NULL).
ALTER TABLE entities ADD COLUMN parent_id bigint NULL REFERENCES entities (id) ON DELETE CASCADE;

CREATE INDEX entities_by_parent ON entities (parent_id);

-- A subscription's filter rules; name_key is the lowercase name, unique per subscription, sorting
-- bytewise ("C") like entities.name_key. The unique index also serves the lookups and cascades by
-- subscription. Identity ids are never reused and follow creation order, the order rules are
-- listed (and evaluated) in.
CREATE TABLE rules (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id bigint      NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    name_key        text        COLLATE "C" NOT NULL,
    definition_json text        NOT NULL,
    created_at      timestamptz NOT NULL,
    UNIQUE (subscription_id, name_key)
);
