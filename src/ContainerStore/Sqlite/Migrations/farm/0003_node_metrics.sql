-- Farm database, schema version 3: where each node serves its Prometheus metrics (HTTP/1.1, its
-- own port: the gRPC port speaks HTTP/2 only). NULL for a node that has not said.
ALTER TABLE nodes ADD COLUMN metrics_address TEXT NULL;
