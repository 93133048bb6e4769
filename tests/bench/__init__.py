"""`make bench`: speed and memory, measured as ratios within one run and printed as a table.
Never part of the unit suite: timings belong here, not in assertions."""
