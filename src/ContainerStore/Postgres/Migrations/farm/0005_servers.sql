-- Farm database, schema version 5: the database servers a container may be placed on, by name
-- (PostgreSQL farms spread over several servers), and each container's server (NULL: the farm
-- database's own server). Names compare bytewise ("C"), as entity names do.
CREATE TABLE servers (
    name              text        COLLATE "C" NOT NULL PRIMARY KEY,
    connection_string text        NOT NULL,
    created_at        timestamptz NOT NULL
);

ALTER TABLE containers ADD COLUMN server text COLLATE "C" NULL REFERENCES servers (name);
