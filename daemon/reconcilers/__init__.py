"""Reconcilers: one module per concern, each a pure ``decide(state, key, now)``.

No I/O, no wall clock, no randomness: `now` is the event time of the state, and everything a
reconciler wants done is returned as intents, logged before the actuator carries them out.
"""
