"""Cluster I/O: the API transport, list+watch ingest into the log, and the actuator."""
