-- Farm database, schema version 1.
-- Times are timestamptz taken from the database server's clock (statement_timestamp()), never a node's.

CREATE TABLE nodes (
    id           bigint      PRIMARY KEY,
    address      text        NOT NULL,
    state        text        NOT NULL,
    process_id   integer     NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

-- An identity never hands out an id twice, even after a rollback: a container id names its database.
CREATE TABLE containers (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    connection_string text        NOT NULL,
    owner_node        bigint      NULL,
    epoch             bigint      NOT NULL DEFAULT 0,
    lease_expires_at  timestamptz NULL,
    owned_since       timestamptz NULL
);

-- Never reused either: container databases key rows by entity id, and a reused id would inherit a
-- deleted entity's leftover messages. name_key sorts bytewise ("C") so listings do not depend on
-- the server's locale.
CREATE TABLE entities (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL,
    name_key        text        COLLATE "C" NOT NULL UNIQUE,
    kind            text        NOT NULL,
    container_id    bigint      NOT NULL REFERENCES containers (id),
    properties_json text        NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE INDEX entities_by_container ON entities (container_id);
