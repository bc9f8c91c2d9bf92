#!/usr/bin/env python3
"""WAL pages a group commit writes on one queue in a steady state: each commit inserts PER 1 KB
messages at the tail and deletes the PER oldest, as single-queue's commits do (perf/README
"Session 56"). Compares delete orders and page sizes; prints WAL frames and KB per commit.
Farm's messages table and its sub-queue index (the primary-key index comes with the table).
Usage: python3 perf/sqlite-deletes.py [PER] [COMMITS]   (defaults 86 300)
"""
import os, random, sqlite3, sys, tempfile

PER = int(sys.argv[1]) if len(sys.argv) > 1 else 86
COMMITS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
BACKLOG = 300
SCHEMA = """
CREATE TABLE messages (entity_id INTEGER NOT NULL, sequence_number INTEGER NOT NULL, sub_queue INTEGER NOT NULL,
 state INTEGER NOT NULL, delivery_count INTEGER NOT NULL, enqueued_at_ms INTEGER NOT NULL, scheduled_at_ms INTEGER NULL,
 expires_at_ms INTEGER NULL, message_id TEXT NULL, dl_reason TEXT NULL, dl_description TEXT NULL, dl_source TEXT NULL,
 payload BLOB NULL, payload_size INTEGER NOT NULL, PRIMARY KEY (entity_id, sequence_number)) STRICT;
CREATE INDEX messages_by_sub_queue ON messages (entity_id, sub_queue, state, sequence_number, payload_size);
"""


def run(order, page_size=4096):
    """order: asc, desc, runs (settlements of four receivers in shuffled runs), range (one statement), none (no deletes)."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "c.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA page_size = {page_size}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL's length is then what the commits wrote
    db.executescript(SCHEMA)
    body = os.urandom(1100)  # a 1 KB body as its stored Message
    state = {"next": 1, "oldest": 1}

    def insert(n):
        for _ in range(n):
            s = state["next"]
            db.execute("INSERT INTO messages VALUES (1,?,0,0,1,1700000000000,NULL,NULL,?,NULL,NULL,NULL,?,1100)", (s, str(s), body))
            state["next"] += 1

    db.execute("BEGIN"); insert(BACKLOG); db.execute("COMMIT")
    start = os.path.getsize(path + "-wal")
    rng = random.Random(1)
    for _ in range(COMMITS):
        db.execute("BEGIN")
        insert(PER)
        oldest = state["oldest"]
        state["oldest"] += PER
        keys = list(range(oldest, oldest + PER))
        if order == "desc":
            keys.reverse()
        elif order == "runs":
            runs = [keys[i:i + 12] for i in range(0, len(keys), 12)]
            rng.shuffle(runs)
            keys = [k for r in runs for k in r]
        elif order == "range":
            db.execute("DELETE FROM messages WHERE entity_id = 1 AND sequence_number BETWEEN ? AND ?", (keys[0], keys[-1]))
            keys = []
        elif order == "none":
            keys = []
        for k in keys:
            db.execute("DELETE FROM messages WHERE entity_id = 1 AND sequence_number = ?", (k,))
        db.execute("COMMIT")
    frames = (os.path.getsize(path + "-wal") - max(start, 32)) / (page_size + 24)
    db.close()
    return frames / COMMITS, frames * (page_size + 24) / COMMITS / 1024


if __name__ == "__main__":
    for order in ("none", "asc", "desc", "runs", "range"):
        f, kb = run(order)
        print(f"4096-byte pages, deletes {order:5}: {f:6.1f} frames, {kb:5.0f} KB a commit of {PER} in and {PER if order != 'none' else 0} out")
    for size in (1024, 2048, 8192, 16384):
        f, kb = run("asc", size)
        print(f"{size:5}-byte pages, deletes asc  : {f:6.1f} frames, {kb:5.0f} KB a commit")
