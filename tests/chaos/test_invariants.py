"""The campaign's invariants, each shown to hold and to be broken on small hand-made records."""

from __future__ import annotations

from typing import Any

import pytest

from events.intents import Delete
from events.objects import decode_object_dict
from events.schema import Decided, Event, Observed, Outcome, Resynced, Started
from tests.chaos.invariants import (
    Change,
    deleted_once,
    gangs_whole,
    logged_exactly_once,
    no_eviction_after_abort,
    one_acts_at_a_time,
    one_cluster_each,
    pods_per_attempt,
)
from tests.chaos.load import INDEX, JOB_NAME

CLUSTER = "sim-0"


def pod(uid: str, rv: int, type_: str = "MODIFIED", **fields: Any) -> Change:
    """A pod's change; `job`, `index`, `phase`, `node`, `group` fill in what they name."""
    labels = {JOB_NAME: fields["job"]} if "job" in fields else {}
    annotations = {INDEX: str(fields["index"])} if "index" in fields else {}
    spec: dict[str, Any] = {"nodeName": fields.get("node", "")}
    if "group" in fields:
        spec["schedulingGroup"] = {"podGroupName": fields["group"]}
    obj = {
        "metadata": {
            "uid": uid,
            "name": f"pod-{uid}",
            "namespace": "default",
            "resourceVersion": str(rv),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": fields.get("phase", "Pending")},
    }
    return Change("Pod", uid, rv, type_, obj)


def observed(change: Change, type_: str | None = None) -> Observed:
    obj = decode_object_dict("Pod", change.obj)
    return Observed(at=0, cluster=CLUSTER, change=type_ or change.type, obj=obj)  # type: ignore[arg-type]


def listed(rv: int) -> Resynced:
    return Resynced(at=0, cluster=CLUSTER, kind="Pod", resource_version=str(rv))


def logged(*events: Event) -> list[tuple[int, Event]]:
    return list(enumerate(events, start=1))


@pytest.mark.parametrize(
    ("journal", "failed", "violations"),
    [
        pytest.param(
            [
                pod("a", 1, "ADDED", job="j", index=0),
                pod("a", 2, job="j", index=0, phase="Failed"),
                pod("b", 3, "ADDED", job="j", index=0),
                pod("b", 4, job="j", index=0, phase="Succeeded"),
            ],
            {"j": [0]},
            [],
            id="a-failure-made-then-one-retry",
        ),
        pytest.param(
            [
                pod("a", 1, job="j", index=0, phase="Succeeded"),
                pod("b", 2, job="j", index=0, phase="Succeeded"),
            ],
            {},
            ["Job j index 0: 2 pods succeeded"],
            id="two-pods-for-one-index",
        ),
        pytest.param(
            [pod("a", 1, job="j", index=1, phase="Failed"), pod("b", 2, job="j", index=1)],
            {},
            [
                "Job j index 1: 1 pod(s) removed before they finished",
                "Job j index 1: 1 pod(s) failed, 0 made to fail",
            ],
            id="a-failure-nobody-made",
        ),
        pytest.param(
            [
                pod("a", 1, job="p", phase="Succeeded"),
                pod("b", 2, job="p", phase="Running"),
                pod("b", 3, "DELETED", job="p", phase="Running"),
            ],
            {},
            ["Job p: 1 pod(s) removed before they finished"],
            id="an-excess-pod-of-a-plain-job",
        ),
    ],
)
def test_pods_per_attempt(
    journal: list[Change], failed: dict[str, list[int]], violations: list[str]
) -> None:
    assert pods_per_attempt(journal, failed) == violations


@pytest.mark.parametrize(
    ("bound", "violations"),
    [(0, []), (3, []), (2, ["gang g: 2 of 3 members bound"])],
)
def test_gangs_whole(bound: int, violations: list[str]) -> None:
    journal = [pod(str(i), i, group="g", node="n" if i < bound else "") for i in range(3)]
    assert gangs_whole(journal, {"g": 3}) == violations


@pytest.mark.parametrize(
    ("landed", "violations"), [(1, []), (2, ["Pod/sim-0/default/v deleted 2 times"])]
)
def test_deleted_once(landed: int, violations: list[str]) -> None:
    delete = Delete(CLUSTER, "Pod", "default", "v", precondition_uid="u")
    decisions: list[Event] = [
        Decided(at=0, reconciler="gang", key="k", reason="r", intents=(delete,)) for _ in range(2)
    ]
    outcomes: list[Event] = [
        Outcome(at=0, decision=i + 1, index=0, ok=i < landed, code=200 if i < landed else 404)
        for i in range(2)
    ]
    assert deleted_once(logged(*decisions, *outcomes)) == violations


@pytest.mark.parametrize(
    ("ran", "violations"),
    [
        ({"w1": "n"}, []),
        ({"w1": "n", "w2": ""}, []),
        ({"w1": "n", "w2": "n"}, ["Job j ran in w1, w2"]),
    ],
    ids=["one-worker", "a-copy-never-ran", "two-workers"],
)
def test_one_cluster_each(ran: dict[str, str], violations: list[str]) -> None:
    workers = {w: [pod(f"{w}-p", 1, job="j", node=node)] for w, node in ran.items()}
    assert one_cluster_each(workers, ["j"]) == violations


def _multicluster(reason: str, *intents: Delete) -> Decided:
    return Decided(
        at=0, reconciler="multicluster", key="Job/m/ns/j", reason=reason, intents=intents
    )


@pytest.mark.parametrize(
    ("reasons", "violations"),
    [
        (["Reserved: preempts in w1", "Evicting: delete", "Aborted: w1 unreachable"], []),
        (
            ["Reserved: preempts in w1", "Aborted: w1 unreachable", "Evicting: delete"],
            ["Pod/w1/ns/v deleted at seq 3 for Job/m/ns/j, whose claim was aborted at seq 2"],
        ),
        (["Aborted: w1 unreachable", "Reserved: preempts in w2", "Evicting: delete"], []),
    ],
    ids=["deleted-before-the-abort", "deleted-after-it", "deleted-for-a-new-claim"],
)
def test_no_eviction_after_abort(reasons: list[str], violations: list[str]) -> None:
    delete = Delete("w1", "Pod", "ns", "v")
    decided = [_multicluster(r, *((delete,) if r.startswith("Evicting") else ())) for r in reasons]
    assert no_eviction_after_abort(logged(*decided)) == violations


def acted(*spans: tuple[int, int]) -> list[tuple[int, Event]]:
    """A log of one daemon started once per span, deciding at its start, acting at its end."""
    events: list[Event] = []
    for start, end in spans:
        events.append(Started(at=start, version="v", rules="r", settings={}))
        events.append(Decided(at=start, reconciler="job", key="k", reason="r"))
        events.append(Outcome(at=end, decision=len(events), index=0, ok=True, code=200))
    return logged(*events)


@pytest.mark.parametrize(
    ("first", "second", "violations"),
    [
        pytest.param([(0, 10), (30, 40)], [(15, 25), (50, 60)], [], id="taking-turns"),
        pytest.param([(0, 10)], [], [], id="one-alone"),
        pytest.param(
            [(0, 100)],
            [(20, 30), (40, 50)],
            ["daemons 0 and 1 acted at once: 0-100 and 20-30 ms"],
            id="one-acting-through-the-others-turns",
        ),
    ],
)
def test_one_acts_at_a_time(
    first: list[tuple[int, int]], second: list[tuple[int, int]], violations: list[str]
) -> None:
    assert one_acts_at_a_time([acted(*first), acted(*second)]) == violations


ADDED, RUNNING, GONE = (
    pod("a", 5, "ADDED"),
    pod("a", 6, phase="Running"),
    pod("a", 7, "DELETED", phase="Running"),
)


@pytest.mark.parametrize(
    ("journal", "log", "violations"),
    [
        pytest.param(
            [ADDED, RUNNING, GONE],
            [listed(4), observed(ADDED), observed(RUNNING), observed(GONE)],
            [],
            id="every-change-watched",
        ),
        pytest.param(
            [ADDED, RUNNING, GONE],
            [listed(4), observed(ADDED), observed(RUNNING), observed(RUNNING), observed(GONE)],
            ["Pod a at 6 MODIFIED logged 2 times"],
            id="a-change-twice",
        ),
        pytest.param(
            [ADDED, RUNNING],
            [listed(4), observed(ADDED)],
            ["Pod a at 6 MODIFIED: not in the log"],
            id="a-change-lost-after-the-last-list",
        ),
        pytest.param(
            [ADDED, RUNNING],
            [listed(4), observed(ADDED), listed(6), observed(RUNNING)],
            [],
            id="a-change-a-relist-accounts-for",
        ),
        pytest.param(
            [ADDED, RUNNING, GONE],
            [listed(4), observed(ADDED), listed(7)],
            [
                "Pod a at 6 MODIFIED: not in the log, nor its state at the list of 7",
                "Pod a at 7 DELETED: not in the log, nor its state at the list of 7",
            ],
            id="a-deletion-a-relist-missed",
        ),
        pytest.param(
            [ADDED, RUNNING, GONE],
            [listed(7)],
            [],
            id="an-object-born-and-gone-between-lists",
        ),
        pytest.param(
            [ADDED],
            [listed(4), observed(ADDED), observed(pod("a", 9))],
            ["Pod a at 9 logged, never in the cluster"],
            id="a-version-the-cluster-never-had",
        ),
    ],
)
def test_logged_exactly_once(
    journal: list[Change], log: list[Event], violations: list[str]
) -> None:
    assert logged_exactly_once(journal, logged(*log), CLUSTER) == violations


@pytest.mark.parametrize(
    ("until", "violations"),
    [
        pytest.param(5, [], id="after-the-last-catch-up-check"),
        pytest.param(6, ["Pod a at 6 MODIFIED: not in the log"], id="before-it"),
    ],
)
def test_a_change_after_the_log_was_last_caught_up_may_be_missing(
    until: int, violations: list[str]
) -> None:
    log = logged(listed(4), observed(ADDED))
    assert logged_exactly_once([ADDED, RUNNING], log, CLUSTER, until) == violations
