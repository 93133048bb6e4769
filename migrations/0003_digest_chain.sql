-- The digest chain (events/chain.py): each event's digest covers the log up to and including
-- it, and each snapshot records the chain's value at its seq. The store fills in the digests
-- of the events already logged in this migration's transaction (events/store.py,
-- `_fill_in_chain`), so that a log at this version has them all.
ALTER TABLE events ADD COLUMN digest BLOB;

ALTER TABLE snapshots ADD COLUMN digest BLOB;

-- The stored fields never change; a digest may be set only where there is none (the fill-in).
DROP TRIGGER events_no_update;

CREATE TRIGGER events_no_update BEFORE UPDATE OF seq, at, ref, body ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_digest_once BEFORE UPDATE OF digest ON events WHEN OLD.digest IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
