-- Farm database, schema version 5: the database servers a container may be placed on, by name
-- (PostgreSQL farms spread over several servers), and each container's server (NULL: the farm
-- database's own server).
CREATE TABLE servers (
    name              TEXT    NOT NULL PRIMARY KEY,
    connection_string TEXT    NOT NULL,
    created_at        INTEGER NOT NULL
);

ALTER TABLE containers ADD COLUMN server TEXT NULL REFERENCES servers (name);
