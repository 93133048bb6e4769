"""The daemon's loop: the pump (ingest, log, fold, decide, act), leader terms, snapshots."""
