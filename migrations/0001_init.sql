-- The kbatchd event log. Applied by events/migrate.py inside one transaction, which also
-- records the version in schema_migrations, sets PRAGMA user_version and stamps the
-- PRAGMA application_id that identifies a kbatchd log.

-- seq is assigned by the store (dense from 1), never by SQLite. There is deliberately no
-- index besides the primary key: appends are benchmarked against a bare insert, and
-- per-object history (ref) is a rare, offline query that can afford a scan.
CREATE TABLE events (
    seq  INTEGER PRIMARY KEY,
    at   INTEGER NOT NULL,
    ref  TEXT,
    body BLOB NOT NULL
);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

-- Folded state covering events 1..seq; the body is opaque to the store.
CREATE TABLE snapshots (
    seq        INTEGER PRIMARY KEY,
    created_at INTEGER NOT NULL,
    body       BLOB NOT NULL
);

CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
);
