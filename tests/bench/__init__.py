"""`make bench`: speed and memory, measured as ratios within one run and printed as a table.
Never part of the unit suite: timings belong here, not in assertions."""

from daemon.service import wiring

# Every section folds as the daemon does, whether `make bench` runs it or `python -m` does.
wiring.wire()
