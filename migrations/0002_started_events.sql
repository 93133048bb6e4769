-- Logs from this version on hold `Started` events (which kbatchd opened the log, its decision
-- rules' digest and the settings it decided with; see events/schema.py). The tables do not
-- change: the version is raised so that a kbatchd from before it, which could not decode
-- those events, refuses the log with "schema newer than this kbatchd" instead of calling an
-- event corrupt. Their ref is 'Started', so a log's daemon starts are found by that column.
SELECT 1;
