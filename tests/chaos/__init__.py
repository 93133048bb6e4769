"""The fault campaign (`make chaos`): a mixed load run on the simulated cluster under one
seeded fault at a time, each run ending with the invariants of `invariants` checked against
the cluster's own record of every change and against the daemon's log."""

from daemon.service import wiring

# The campaign folds logs (`replay --verify`) in this process, as the daemon does.
wiring.wire()
