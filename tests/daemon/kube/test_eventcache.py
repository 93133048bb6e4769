"""client-go's EventCorrelator, with time passed in: counting repeats, aggregating similar
Events, and the per-object token bucket."""

from __future__ import annotations

from daemon.kube.eventcache import COMBINED, Correlator, Occurrence, Write
from daemon.kube.notes import Involved

JOB = Involved("c1", "Job", "ns", "train", "uid-1")
OTHER = Involved("c1", "Job", "ns", "other", "uid-2")


def event(message: str = "Created pod: train-a", about: Involved = JOB) -> Occurrence:
    return Occurrence(about, "Normal", "SuccessfulCreate", message)


def test_a_new_event_is_created_and_its_repeat_patches_its_count() -> None:
    correlator = Correlator()
    first = correlator.correlate(event(), 100.0)
    again = correlator.correlate(event(), 130.5)
    name = f"train.{int(100.0 * 1e9):x}"
    assert first == Write(name, "ns", "Created pod: train-a", 1, 100.0, 100.0, patch=False)
    assert again == Write(name, "ns", "Created pod: train-a", 2, 100.0, 130.5, patch=True)


def test_another_message_or_object_is_another_event() -> None:
    correlator = Correlator()
    a = correlator.correlate(event("Created pod: train-a"), 1.0)
    b = correlator.correlate(event("Created pod: train-b"), 2.0)
    c = correlator.correlate(event("Created pod: train-a", OTHER), 3.0)
    assert a is not None
    assert b is not None
    assert c is not None
    assert not (a.patch)
    assert not (b.patch)
    assert not (c.patch)
    assert len({a.name, b.name, c.name}) == 3


def test_the_tenth_similar_message_in_ten_minutes_is_combined_into_one_event() -> None:
    correlator = Correlator()
    writes = [correlator.correlate(event(f"Created pod: train-{i}"), float(i)) for i in range(12)]
    assert all(w is not None for w in writes)
    assert [w.message for w in writes[:9] if w] == [f"Created pod: train-{i}" for i in range(9)]
    ninth, tenth, eleventh = writes[9], writes[10], writes[11]
    assert ninth is not None
    assert tenth is not None
    assert eleventh is not None
    assert (ninth.message, ninth.count, ninth.patch) == (
        COMBINED + "Created pod: train-9",
        1,
        False,
    )
    assert (tenth.name, tenth.message, tenth.count, tenth.patch) == (
        ninth.name,
        COMBINED + "Created pod: train-10",
        2,
        True,
    )
    assert eleventh.count == 3


def test_similar_messages_more_than_ten_minutes_apart_start_afresh() -> None:
    correlator = Correlator()
    for i in range(9):
        correlator.correlate(event(f"Created pod: train-{i}"), float(i))
    later = correlator.correlate(event("Created pod: train-x"), 8.0 + 601)
    assert later is not None
    assert later.message == "Created pod: train-x"


def test_the_spam_filter_lets_25_events_of_an_object_through_then_one_per_five_minutes() -> None:
    correlator = Correlator(similar_max=10_000)  # not combined: each its own Event
    passed = [correlator.correlate(event(f"m{i}"), 0.0) is not None for i in range(30)]
    assert passed == [True] * 25 + [False] * 5
    # Another object has its own bucket.
    assert correlator.correlate(event("m0", OTHER), 0.0) is not None
    assert correlator.correlate(event("m30"), 299.0) is None
    assert correlator.correlate(event("m31"), 300.0) is not None
    assert correlator.correlate(event("m32"), 301.0) is None


def test_repeats_count_against_the_spam_filter_as_well() -> None:
    correlator = Correlator(burst=2)
    assert correlator.correlate(event(), 0.0) is not None
    assert correlator.correlate(event(), 0.0) is not None
    assert correlator.correlate(event(), 0.0) is None
    # The count went on while filtered, as client-go's: the next patch says how many there were.
    after = correlator.correlate(event(), 600.0)
    assert after is not None
    assert (after.count, after.patch) == (4, True)


def test_the_caches_keep_the_keys_used_last() -> None:
    correlator = Correlator(entries=2)
    first = correlator.correlate(event("a"), 0.0)
    correlator.correlate(event("b"), 0.0)
    correlator.correlate(event("c"), 0.0)  # "a" is the oldest: forgotten
    again = correlator.correlate(event("a"), 1.0)
    assert first is not None
    assert again is not None
    assert not again.patch
    assert again.name != first.name
