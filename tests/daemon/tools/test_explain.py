"""`--explain`: an object's life read from the log — its changes, the changes of what it
controls, the decisions about it or touching it (preemption by another workload), their
reasons taken apart, and every intent's outcome, however far after its decision it came."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from msgspec.structs import replace

from daemon.tools.explain import ExplainError, explain, flatten, intent_text, render
from events.intents import Bind, Delete, Intent, Patch
from events.objects import Job, JobSet
from events.reasons import categorize, heads, placement, render_placement
from events.schema import Event, Observed
from events.store import EventLog
from tests.events.builders import GPU, make_node, make_pod
from tests.events.replay_story import (
    NOT_ADMITTED,
    PREEMPTED,
    Story,
    owner,
    story,
    write,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Story]:
    path = tmp_path_factory.mktemp("story") / "log.db"
    s = story()
    anyio.run(write, path, s.events)
    return path, s


async def _explain(path: Path, kind: str, name: str, **kwargs: Any) -> dict[str, Any]:
    async with EventLog.open(path, readonly=True) as log:
        data = await explain(log, kind, "ns", name, **kwargs)
    (life,) = data["objects"]
    return life  # type: ignore[no-any-return]


async def test_the_life_of_a_preempted_job(told: tuple[Path, Story]) -> None:
    path, s = told
    life = await _explain(path, "Job", "low")
    assert life["ref"] == "Job/c1/ns/low"
    assert life["family"] == ["Pod/c1/ns/low-0", "Pod/c1/ns/low-1"]  # not the decoy's pod
    decided = [e for e in life["entries"] if e["type"] == "decided"]
    assert [(e["seq"], e["category"], e["about"]) for e in decided] == [
        (s.seqs["admit"], "admitted", "self"),
        (s.seqs["preempt"], "preempted", "other"),  # decided about high, deleting low's pods
        (s.seqs["restart"], "restarted", "self"),
    ]
    preempt = decided[1]
    assert preempt["key"] == "Job/c1/ns/high"
    assert [i["touches"] for i in preempt["intents"]] == [True, True]
    seqs = [e["seq"] for e in life["entries"]]
    assert seqs == sorted(seqs)
    assert s.seqs["other-0"] not in seqs


async def test_every_outcome_is_found_and_in_flight_intents_say_so(
    told: tuple[Path, Story],
) -> None:
    path, s = told
    life = await _explain(path, "Job", "low")
    outcomes = {
        (e["decision"], e["index"]): (e["ok"], e["code"])
        for e in life["entries"]
        if e["type"] == "outcome"
    }
    assert outcomes == {
        (s.seqs["admit"], 0): (True, 0),
        (s.seqs["admit"], 1): (True, 0),
        (s.seqs["preempt"], 0): (True, 0),
        # GAP events after its decision: found by reading on past the first window.
        (s.seqs["preempt"], 1): (False, 404),
    }
    restart = next(e for e in life["entries"] if e.get("seq") == s.seqs["restart"])
    assert restart["pending"] == [0]
    assert life["totals"] | {"categories": None} == life["totals"] | {
        "observed": 7,
        "decisions": 3,
        "intents": 5,
        "failed": 1,
        "pending": 1,
        "categories": None,
    }


async def test_observed_changes_name_what_changed(told: tuple[Path, Story]) -> None:
    path, s = told
    life = await _explain(path, "Job", "low")
    by_seq = {e["seq"]: e for e in life["entries"]}
    running = by_seq[s.seqs["low-0-run"]]
    assert running["relation"] == "controlled"
    assert running["changes"]["phase"] == ["Pending", "Running"]
    assert running["changes"]["node_name"] == [None, "h1"]
    assert "deletion_ts" in by_seq[s.seqs["low-0-deleting"]]["changes"]
    assert by_seq[s.seqs["low-0-gone"]]["change"] == "DELETED"
    added = by_seq[s.seqs["low"]]
    assert added["changes"]["spec.parallelism"] == [None, "2"]


async def test_a_refusal_carries_its_placement_numbers(told: tuple[Path, Story]) -> None:
    path, s = told
    life = await _explain(path, "Job", "high")
    refusal = next(e for e in life["entries"] if e.get("seq") == s.seqs["refuse"])
    assert refusal["category"] == "not-admitted"
    assert refusal["placement"] == {
        "mode": "required",
        "level": "cloud.provider.com/topology-rack",
        "fit": 1,
        "needed": 2,
        "unit": "pod",
        "excluded_nodes": {"resource nvidia.com/gpu": 2},
        "total_nodes": 4,
    }


async def test_the_text_tells_the_story_in_order(told: tuple[Path, Story]) -> None:
    path, _ = told
    async with EventLog.open(path, readonly=True) as log:
        text = render(await explain(log, "Job", "ns", "low"))
    lines = text.splitlines()
    assert lines[0] == f"Job/c1/ns/low at seq {len(story().events):,}: present"
    assert lines[1] == "  controls: Pod low-0, Pod low-1"
    assert "  decided by gang about Job/c1/ns/high [preempted]" in text
    assert "by Job/c1/ns/high, which touches: delete Pod low-0; delete Pod low-1" in text
    assert "FAILED 404 pods not found: delete Pod low-1" in text
    assert "→ create Pod low-2 (no outcome yet)" in text
    assert "Pod low-0 MODIFIED: phase Pending→Running, node_name=h1" in text
    order = [text.index(word) for word in ("[admitted]", "[preempted]", "[restarted]")]
    assert order == sorted(order)
    async with EventLog.open(path, readonly=True) as log:
        high = render(await explain(log, "Job", "ns", "high"))
    assert (
        "not admitted: at level cloud.provider.com/topology-rack (required): 1 of 2 pod(s) "
        "fit; nodes excluded of 4: 2 by resource nvidia.com/gpu"
    ) in high


async def test_a_daemon_start_during_the_life_is_told_and_one_before_it_is_not(
    told: tuple[Path, Story],
) -> None:
    path, s = told
    life = await _explain(path, "Job", "low")
    started = [e for e in life["entries"] if e["type"] == "started"]
    assert [(e["seq"], e["version"], e["rules"]) for e in started] == [
        (s.seqs["restart-daemon"], "0.1.0", "0123456789abcdef")
    ]
    seqs = [e["seq"] for e in life["entries"]]
    assert seqs == sorted(seqs)
    assert life["totals"]["decisions"] == 3  # a start is not a decision
    async with EventLog.open(path, readonly=True) as log:
        text = render(await explain(log, "Job", "ns", "low"))
    assert "kbatchd 0.1.0 started (decision rules 0123456789abcdef)" in text


async def test_until_stops_the_story(told: tuple[Path, Story]) -> None:
    path, s = told
    life = await _explain(path, "Job", "low", until=s.seqs["preempt"])
    assert max(e["seq"] for e in life["entries"]) == s.seqs["preempt"]
    preempt = life["entries"][-1]
    # Its outcomes come later than the point asked about: not shown, and in flight there.
    assert preempt["pending"] == [0, 1]


async def test_what_is_controlled_through_another_object_and_listed_first(
    tmp_path: Path,
) -> None:
    """A JobSet's Job's pods belong to its story, even where a list showed the pod before
    the Job (the family is found over all the events, not in order)."""
    s = Story()
    s.observe(make_pod("w-0", requests={GPU: 1}, owner=owner("Job", "w")))  # type: ignore[arg-type]
    s.observe(JobSet(name="train", namespace="ns", uid="uid-train"))  # type: ignore[arg-type]
    s.observe(Job(name="w", namespace="ns", uid="uid-w", owners=(owner("JobSet", "train"),)))
    s.observe(make_pod("loose", requests={GPU: 1}))
    path = tmp_path / "log.db"
    await write(path, s.events)
    async with EventLog.open(path, readonly=True) as log:
        data = await explain(log, "JobSet", "ns", "train")
    assert data["objects"][0]["family"] == ["Job/c1/ns/w", "Pod/c1/ns/w-0"]


async def test_an_unknown_object_is_an_error_naming_it(told: tuple[Path, Story]) -> None:
    path, _ = told
    async with EventLog.open(path, readonly=True) as log:
        with pytest.raises(ExplainError, match="no Job ns/nothing up to seq"):
            await explain(log, "Job", "ns", "nothing")


async def test_a_cluster_scoped_object(told: tuple[Path, Story]) -> None:
    path, _ = told
    async with EventLog.open(path, readonly=True) as log:
        data = await explain(log, "Node", "", "h1")
    (life,) = data["objects"]
    assert life["ref"] == "Node/c1//h1"
    assert [e["change"] for e in life["entries"]] == ["ADDED"]


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("finished", 1_767_225_600_000, "2026-01-01T00:00:00.000+00:00"),
        ("ready_changed", 1_767_225_600_500, "2026-01-01T00:00:00.500+00:00"),
        ("deletion_ts", 1_767_225_601_000, "2026-01-01T00:00:01.000+00:00"),
        ("restart_count", 3, "3"),
    ],
)
def test_times_are_shown_as_times(field: str, value: int, shown: str) -> None:
    pod = replace(make_pod("p"), **{field: value})
    assert flatten(pod)[field] == shown


async def test_a_node_whose_name_begins_another_tells_only_its_own_life(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    events: list[Event] = [
        Observed(at=1, cluster="c1", change="ADDED", obj=make_node("n1")),
        Observed(at=2, cluster="c1", change="ADDED", obj=make_node("n10")),
        Observed(at=3, cluster="c1", change="MODIFIED", obj=make_node("n10", rack="r2")),
    ]
    await write(path, events)
    async with EventLog.open(path, readonly=True) as log:
        (life,) = (await explain(log, "Node", "", "n1"))["objects"]
    assert [(e["seq"], e["ref"]) for e in life["entries"]] == [(1, "Node/c1//n1")]


# ---------------------------------------------------------------------------------------------
# Reasons


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("Admitted: ns/a: 4 pod(s)", "admitted"),
        ("Admitted", "admitted"),
        (NOT_ADMITTED, "not-admitted"),
        ("NotEnoughMembers: 1 of minCount 4", "not-admitted"),
        ("ExtraUnitsUnschedulable: x", "not-admitted"),
        (PREEMPTED, "preempted"),
        ("PreemptLowerPriority: victims ns/b", "preempted"),
        ("RestartAllContainers: pod ns/a-0 exited 42", "restarted"),
        ("PodsReadyTimeout: 1 of minCount 2 pod(s) ready 60s after admission", "restarted"),
        ("LeaderLost: leader gone; restarting the workload", "restarted"),
        ("CreatePods: creating 4 pod(s); 0 active of 4 wanted", "started"),
        ("PodsReady: 4 pod(s) ready", "started"),
        ("BackOff: no new pods before 2026-01-01T00:00:00Z", "backoff"),
        ("BackoffLimitExceeded: Failed (Job has reached the specified backoff limit)", "finished"),
        ("Suspended: Job suspended", "suspended"),
        ("Status: 4 active, 0 terminating; 1 index(es) completed", "other"),
        ("NotEnoughMembers: 1 of minCount 2; Admitted: ns/b: 2 pod(s)", "admitted"),
        ("free text", "other"),
    ],
)
def test_reason_categories(reason: str, category: str) -> None:
    assert categorize(reason) == category


def test_heads_skip_details() -> None:
    reason = "CreatePods: creating 1 pod(s); Job resumed; StuckTerminating: pod x"
    assert heads(reason) == ["CreatePods", "StuckTerminating"]


@pytest.mark.parametrize(
    ("reason", "expected", "text"),
    [
        (
            "Unschedulable: TopologyPlacementFailed: preferred kubernetes.io/hostname: doesn't "
            'allow to fit any of 3 pod(s). Total nodes: 8; excluded: nodeSelector: 2, taint "'
            'gpu=bad:NoSchedule": 1',
            {
                "mode": "preferred",
                "level": "kubernetes.io/hostname",
                "fit": 0,
                "needed": 3,
                "unit": "pod",
                "excluded_nodes": {"taint gpu=bad:NoSchedule": 1, "nodeSelector": 2},
                "total_nodes": 8,
            },
            "at level kubernetes.io/hostname (preferred): 0 of 3 pod(s) fit; nodes excluded of "
            "8: 1 by taint gpu=bad:NoSchedule, 2 by nodeSelector",
        ),
        (
            "Unschedulable: RatioUnitsUnschedulable: only 1 of 2 unit(s) of 1 leader + 4 worker "
            "fit, each within one rack",
            {"fit": 1, "needed": 2, "unit": "unit", "level": "rack"},
            "at level rack: 1 of 2 unit(s) fit",
        ),
        (
            "NodeAssignmentFailed: 2 of 4 pod(s) for domain b1,r1 fit on no single node",
            {"fit": 2, "needed": 4, "unit": "pod", "domain": "b1,r1"},
            "2 of 4 pod(s) fit; in domain b1,r1",
        ),
        (
            "NotEnoughMembers: 3 of minCount 4, 1 gated",
            {"members": 3, "min_count": 4},
            "3 member(s) of minCount 4",
        ),
    ],
    ids=["none-fit", "ratio-units", "node-assignment", "members"],
)
def test_placement_numbers(reason: str, expected: dict[str, Any], text: str) -> None:
    found = placement(reason)
    assert found == expected
    assert render_placement(found) == text


def test_no_placement_numbers_in_other_reasons() -> None:
    assert placement("CreatePods: creating 4 pod(s)") is None


def test_a_job_without_namespace_match_is_not_family(tmp_path: Path) -> None:
    """Same name, other namespace: not the object asked about."""
    s = Story()
    s.observe(replace(make_pod("p", requests={GPU: 1}, owner=owner("Job", "j")), namespace="x"))
    s.observe(Job(name="j", namespace="ns", uid="uid-j"))
    path = tmp_path / "log.db"
    anyio.run(write, path, s.events)

    async def family() -> list[str]:
        async with EventLog.open(path, readonly=True) as log:
            data = await explain(log, "Job", "ns", "j")
        return data["objects"][0]["family"]  # type: ignore[no-any-return]

    assert anyio.run(family) == []


async def test_events_under_match_whole_prefixes_only(tmp_path: Path) -> None:
    """The store's ref scan behind --explain: a namespace's prefix ends at its slash, and
    LIKE's wildcards in it are plain characters."""
    s = Story()
    for namespace in ("ns", "ns-2", "n_"):
        s.observe(replace(make_pod("p", requests={GPU: 1}), namespace=namespace))
    path = tmp_path / "log.db"
    await write(path, s.events)
    async with EventLog.open(path, readonly=True) as log:
        assert [seq for seq, _ in await log.events_under(["Pod/c1/ns/"])] == [1]
        assert [seq for seq, _ in await log.events_under(["Pod/c1/n_/", "Pod/c1/ns-2/"])] == [
            2,
            3,
        ]
        assert await log.events_under(["Pod/c1/n%/"]) == []
        assert await log.events_under([]) == []
        assert [seq for seq, _ in await log.events_under(["Pod/"], until=2)] == [1, 2]


@pytest.mark.parametrize(
    ("intent", "home", "text"),
    [
        (Delete("w2", "Pod", "ns", "fill-0", precondition_uid="u"), "m", "delete Pod fill-0 in w2"),
        (Delete("m", "Pod", "ns", "fill-0", precondition_uid="u"), "m", "delete Pod fill-0"),
        (Bind("c1", "Pod", "ns", "p", node="n1", uid="u"), "c1", "bind Pod p → n1"),
        (
            Patch("w1", "Job", "ns", "big", patch={"spec": {"suspend": False}}),
            "m",
            "patch Job big in w1 (spec.suspend)",
        ),
    ],
    ids=["another-cluster", "its-own", "bind", "patch-elsewhere"],
)
def test_an_intent_names_its_cluster_when_it_is_not_the_decisions(
    intent: Intent, home: str, text: str
) -> None:
    assert intent_text(intent, home) == text
