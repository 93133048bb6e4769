"""The event log: schema, slim objects, fold into state, store, snapshots and replay.

Everything here except `events.store` and `events.migrate` is pure: no I/O, no clock, no
randomness. Time enters only through the `at` field of events.
"""
