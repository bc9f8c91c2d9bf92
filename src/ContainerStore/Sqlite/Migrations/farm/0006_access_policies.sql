-- Farm database, schema version 6: the shared access policies clients sign their
-- SharedAccessSignature tokens with (Azure Service Bus's claims-based security, for the AMQP front
-- door), and where each node listens for AMQP (amqp://host:port; NULL when it does not).
-- rights is a bit set: 1 Listen, 2 Send, 4 Manage (Manage always comes with Send and Listen).
-- Names compare bytewise, as a SharedAccessKeyName does in Azure. The first policy,
-- RootManageSharedAccessKey, is created by the store once this schema is in place: its keys are
-- random, which a migration script cannot make well.
CREATE TABLE access_policies (
    name          TEXT    NOT NULL PRIMARY KEY,
    rights        INTEGER NOT NULL,
    primary_key   TEXT    NOT NULL,
    secondary_key TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

ALTER TABLE nodes ADD COLUMN amqp_address TEXT NULL;
