#!/usr/bin/env python3
"""Pages written (WAL frames) and CPU per row operation when 1 KB messages are inserted and deleted
across many queues of one SQLite container, for three layouts of the messages table:
  farm     Farm's schema: a rowid table, its (entity_id, sequence_number) primary-key index and
           messages_by_sub_queue
  without  WITHOUT ROWID, clustered on (entity_id, sequence_number), with the same secondary index
  keyed    INTEGER PRIMARY KEY = (entity_id << 40) | sequence_number: clustered by entity, no
           separate primary-key index
Each commit inserts BATCH messages into random queues and deletes the oldest of BATCH random queues,
as group commits of lone messages do. synchronous=OFF: the figures are pages and CPU, not fsync.
Usage: python3 perf/sqlite-pages.py [ENTITIES] [BATCH] [CACHE_SIZE]   (defaults 15000 8 -2000)
"""
import os, random, sys, tempfile, time, sqlite3

ENTITIES = int(sys.argv[1]) if len(sys.argv) > 1 else 15000
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 8
CACHE = int(sys.argv[3]) if len(sys.argv) > 3 else -2000
OPS = 60000
COLUMNS = """sub_queue INTEGER NOT NULL, state INTEGER NOT NULL, delivery_count INTEGER NOT NULL,
 enqueued_at_ms INTEGER NOT NULL, scheduled_at_ms INTEGER NULL, expires_at_ms INTEGER NULL, message_id TEXT NULL,
 dl_reason TEXT NULL, dl_description TEXT NULL, dl_source TEXT NULL, payload BLOB NULL, payload_size INTEGER NOT NULL"""
NULLS = "0,0,0,?,NULL,NULL,NULL,NULL,NULL,NULL,?,1024"


def layout(db, kind):
    if kind == "keyed":
        db.execute(f"CREATE TABLE messages (id INTEGER PRIMARY KEY, {COLUMNS}) STRICT")
        db.execute("CREATE INDEX messages_by_sub_queue ON messages ((id >> 40), sub_queue, state, id, payload_size)")
        return (f"INSERT INTO messages VALUES (?,{NULLS})", "DELETE FROM messages WHERE id=?", lambda e, s: ((e << 40) | s,))
    rowid = "WITHOUT ROWID, " if kind == "without" else ""
    db.execute(f"CREATE TABLE messages (entity_id INTEGER NOT NULL, sequence_number INTEGER NOT NULL, {COLUMNS}, "
               f"PRIMARY KEY (entity_id, sequence_number)) {rowid}STRICT")
    db.execute("CREATE INDEX messages_by_sub_queue ON messages (entity_id, sub_queue, state, sequence_number, payload_size)")
    return (f"INSERT INTO messages VALUES (?,?,{NULLS})", "DELETE FROM messages WHERE entity_id=? AND sequence_number=?", lambda e, s: (e, s))


def run(kind, directory):
    path = os.path.join(directory, f"{kind}.db")
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=OFF", "wal_autocheckpoint=0", f"cache_size={CACHE}"):
        db.execute(f"PRAGMA {pragma}")
    insert, delete, key = layout(db, kind)
    payload = os.urandom(1024)
    nxt, head = [1] * ENTITIES, [1] * ENTITIES
    db.execute("BEGIN")
    for e in range(ENTITIES):  # a backlog of 3 a queue
        for _ in range(3):
            db.execute(insert, key(e, nxt[e]) + (0, payload))
            nxt[e] += 1
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rnd, rows, commits = random.Random(1), 0, OPS // BATCH
    start = time.process_time()
    for _ in range(commits):
        db.execute("BEGIN")
        for _ in range(BATCH):
            e = rnd.randrange(ENTITIES)
            db.execute(insert, key(e, nxt[e]) + (0, payload))
            nxt[e] += 1
            d = rnd.randrange(ENTITIES)
            if head[d] < nxt[d]:
                db.execute(delete, key(d, head[d]))
                head[d] += 1
            rows += 2
        db.execute("COMMIT")
    cpu = time.process_time() - start
    frames = os.path.getsize(path + "-wal") / (4096 + 24)
    db.close()
    print(f"{kind:8} entities {ENTITIES} batch {BATCH}: {frames / commits:.1f} pages a commit, "
          f"{frames / rows:.2f} a row op, {1e6 * cpu / rows:.1f} us CPU a row op")


with tempfile.TemporaryDirectory() as directory:
    for kind in ("farm", "without", "keyed"):
        run(kind, directory)
