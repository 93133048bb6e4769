"""The debugging tools over a log: replay, show, explain, timeline, verify, jsonl and the demo."""
