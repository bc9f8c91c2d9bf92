-- Farm database, schema version 6: the shared access policies clients sign their
-- SharedAccessSignature tokens with (Azure Service Bus's claims-based security, for the AMQP front
-- door), and where each node listens for AMQP (amqp://host:port; NULL when it does not).
-- rights is a bit set: 1 Listen, 2 Send, 4 Manage (Manage always comes with Send and Listen).
-- Names compare bytewise ("C"), as a SharedAccessKeyName does in Azure. The first policy,
-- RootManageSharedAccessKey, is created by the store once this schema is in place: its keys are
-- random, which a migration script cannot make well.
CREATE TABLE access_policies (
    name          text        COLLATE "C" NOT NULL PRIMARY KEY,
    rights        integer     NOT NULL,
    primary_key   text        NOT NULL,
    secondary_key text        NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

ALTER TABLE nodes ADD COLUMN amqp_address text NULL;
