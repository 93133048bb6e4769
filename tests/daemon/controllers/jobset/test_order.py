"""Spec C7: `dependsOn` and `startupPolicy: InOrder`, decision by decision and played on the
in-memory world (both reconcilers, kubelet, garbage collector)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.jobset.order import dependency_reached
from daemon.controllers.jobset.spec import DependsOn, ReplicatedJob
from daemon.controllers.jobset.status import Counters
from daemon.controllers.jobset.validation import validate_raw
from tests.daemon.controllers.jobset_builders import (
    COMPLETE,
    READY,
    RUNNING,
    child,
    conditions,
    counters,
    created_jobs,
    decide,
    failed,
    job_patches,
    jobset_json,
    js_status,
    make_jobset,
    rjob,
    state_of,
)
from tests.daemon.controllers.world import JobSetWorld


def _ready_jobs(world: JobSetWorld) -> list[str]:
    return sorted(n for n, j in world.jobs().items() if (j.status.get("ready") or 0) >= 1)


def test_c7_1_b_depends_on_a_ready() -> None:
    js = make_jobset("js", [rjob("a", 1), rjob("b", 3, depends_on=[("a", "Ready")])])
    first = decide(state_of(js))
    assert created_jobs(first) == ["js-a-0"]
    assert first is not None
    assert "b waits for a Ready (0/1 ready or finished)" in first.reason
    assert created_jobs(decide(state_of(js, child(js, "a", 0, RUNNING)))) == []
    assert created_jobs(decide(state_of(js, child(js, "a", 0, READY)))) == [
        "js-b-0",
        "js-b-1",
        "js-b-2",
    ]
    everything = [child(js, "a", 0, READY), *(child(js, "b", i, READY) for i in range(3))]
    patch = js_status(decide(state_of(js, *everything)))
    assert counters(patch) == {"a": (1, 0, 0, 1, 0), "b": (3, 0, 0, 1 * 3, 0)}


def test_c7_1_played_on_the_world() -> None:
    world = JobSetWorld(start_ms=1000)
    world.create_jobset(
        jobset_json("js", [rjob("a", 1), rjob("b", 3, depends_on=[("a", "Ready")])])
    )
    world.settle()
    assert sorted(world.jobs()) == ["js-a-0"]
    world.run(lambda: len(world.jobs()) == 4)
    assert _ready_jobs(world) == ["js-a-0"]  # b appeared only once a was ready
    world.run(lambda: _ready_jobs(world) == ["js-a-0", "js-b-0", "js-b-1", "js-b-2"])
    world.settle()
    status = {e["name"]: e["ready"] for e in world.jobset().status["replicatedJobsStatus"]}
    assert status == {"a": 1, "b": 3}


def test_c7_2_chain_a_complete_then_b_then_c_ready() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json(
            "js",
            [
                rjob("a", 1),
                rjob("b", 1, depends_on=[("a", "Complete")]),
                rjob("c", 1, depends_on=[("b", "Ready")]),
            ],
        )
    )
    world.run(lambda: any(p.ready for p in world.live_pods()))
    world.run()
    assert sorted(world.jobs()) == ["js-a-0"]  # a ready is not enough for b
    (pod,) = world.live_pods()
    world.finish_pod(pod.name)
    world.run(lambda: "js-b-0" in world.jobs())
    assert "js-c-0" not in world.jobs()
    world.run(lambda: "js-c-0" in world.jobs())
    assert world.jobs()["js-b-0"].status.get("ready") == 1


@pytest.mark.parametrize(
    ("a", "b", "created"),
    [
        ("complete", "complete", True),
        ("complete", "ready", False),
        ("ready", "complete", False),
        ("failed", "complete", False),
    ],
)
def test_c7_3_c_depends_on_a_and_b_complete(a: str, b: str, created: bool) -> None:
    js = make_jobset(
        "js",
        [
            rjob("a", 1),
            rjob("b", 1),
            rjob("c", 1, depends_on=[("a", "Complete"), ("b", "Complete")]),
        ],
        failurePolicy={
            "maxRestarts": 5,
            "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}],
        },
    )
    states = {"complete": COMPLETE, "ready": READY, "failed": failed()}
    decision = decide(state_of(js, child(js, "a", 0, states[a]), child(js, "b", 0, states[b])))
    if a == "failed":
        assert created_jobs(decision) == []  # a failure runs the failure policy instead
    else:
        assert created_jobs(decision) == (["js-c-0"] if created else [])


def test_c7_3_c_depends_on_a_ready_and_b_complete() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1), rjob("b", 1), rjob("c", 1, depends_on=[("a", "Ready"), ("b", "Complete")])],
    )
    assert (
        created_jobs(decide(state_of(js, child(js, "a", 0, READY), child(js, "b", 0, READY)))) == []
    )
    assert created_jobs(
        decide(state_of(js, child(js, "a", 0, READY), child(js, "b", 0, COMPLETE)))
    ) == ["js-c-0"]


def test_c7_4_resume_a_first_then_b_once_a_is_ready_again() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json("js", [rjob("a", 2), rjob("b", 1, depends_on=[("a", "Ready")])], suspend=True)
    )
    world.run()
    assert sorted(world.jobs()) == ["js-a-0", "js-a-1"]  # b waits even while suspended
    assert all(j.spec["suspend"] is True for j in world.jobs().values())
    assert world.conditions()["Suspended"] == "True"
    assert world.live_pods() == []
    world.update(world.jobset(), suspend=False)
    world.settle()
    assert [j.spec["suspend"] for j in world.jobs().values()] == [False, False]
    assert "js-b-0" not in world.jobs()
    world.run(lambda: "js-b-0" in world.jobs())
    assert _ready_jobs(world) == ["js-a-0", "js-a-1"]
    assert world.jobs()["js-b-0"].spec["suspend"] is False
    assert world.conditions()["Suspended"] == "False"


def test_c7_4_resume_merges_the_new_scheduling_directives() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1, pod_labels={"queue": "gold"})],
        suspend=False,
    )
    job = child(js, "a", 0, {"active": 0}, suspend=True)
    decision = decide(state_of(js, job))
    patch = job_patches(decision)["js-a-0"]
    assert patch["spec"]["suspend"] is False
    # The template's labels were already on the Job: nothing else to merge.
    assert "template" not in patch["spec"]
    js2 = make_jobset(
        "js",
        [
            rjob(
                "a",
                1,
                pod_labels={"queue": "gold", "kueue.x-k8s.io/podset": "main"},
            )
        ],
    )
    patch = job_patches(decide(state_of(js2, job)))["js-a-0"]
    assert patch["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
    assert patch["spec"]["template"]["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "0"


def test_c7_4_a_started_suspended_job_has_its_start_time_cleared_first() -> None:
    js = make_jobset("js", [rjob("a", 1)])
    job = child(js, "a", 0, {"active": 0, "startTime": "2026-01-01T00:00:00Z"}, suspend=True)
    patch = job_patches(decide(state_of(js, job)))["js-a-0"]
    assert patch == {"status": {"startTime": None}}


DEPS: list[tuple[str, list[tuple[str, str]], dict[str, Counters], bool]] = [
    ("no-deps", [], {}, True),
    ("status-missing", [("a", "Ready")], {}, False),
    ("complete-reached", [("a", "Complete")], {"a": Counters(succeeded=2)}, True),
    ("complete-not-reached", [("a", "Complete")], {"a": Counters(succeeded=1, ready=1)}, False),
    ("ready-counts-ready", [("a", "Ready")], {"a": Counters(ready=2)}, True),
    (
        "ready-counts-finished",
        [("a", "Ready")],
        {"a": Counters(ready=0, succeeded=1, failed=1)},
        True,
    ),
    ("ready-not-reached", [("a", "Ready")], {"a": Counters(ready=1)}, False),
    (
        "all-required",
        [("a", "Ready"), ("b", "Complete")],
        {"a": Counters(ready=2), "b": Counters(ready=2)},
        False,
    ),
    (
        "all-held",
        [("a", "Ready"), ("b", "Complete")],
        {"a": Counters(ready=2), "b": Counters(succeeded=2)},
        True,
    ),
]


@pytest.mark.parametrize(("case", "deps", "status", "reached"), DEPS, ids=[d[0] for d in DEPS])
def test_c7_5_dependency_reached_status(
    case: str, deps: list[tuple[str, str]], status: dict[str, Counters], reached: bool
) -> None:
    rj = ReplicatedJob(name="c", replicas=1, depends_on=[DependsOn(n, s) for n, s in deps])
    result = dependency_reached(rj, {"a": 2, "b": 2}, status)
    assert (result is None) == reached


WEBHOOK: list[tuple[str, list[dict[str, Any]], dict[str, Any], str]] = [
    (
        "first-has-depends-on",
        [rjob("job-1", depends_on=[("job-2", "Ready")]), rjob("job-2")],
        {},
        "the first replicatedJob cannot have dependsOn",
    ),
    (
        "depends-on-later",
        [rjob("job-1"), rjob("job-2", depends_on=[("job-3", "Ready")]), rjob("job-3")],
        {},
        "replicatedJob: job-2 cannot depend on replicatedJob: job-3",
    ),
    (
        "depends-on-unknown",
        [rjob("job-1"), rjob("job-2", depends_on=[("nope", "Ready")])],
        {},
        "replicatedJob: job-2 cannot depend on replicatedJob: nope",
    ),
    (
        "depends-on-itself",
        [rjob("job-1"), rjob("job-2", depends_on=[("job-2", "Ready")])],
        {},
        "replicatedJob: job-2 cannot depend on itself",
    ),
    (
        "with-in-order",
        [rjob("job-1"), rjob("job-2", depends_on=[("job-1", "Ready")])],
        {"startupPolicy": {"startupPolicyOrder": "InOrder"}},
        "dependsOn cannot be set together with startupPolicy InOrder",
    ),
    (
        "more-than-five",
        [
            *(rjob(f"j{i}") for i in range(6)),
            rjob("last", depends_on=[(f"j{i}", "Ready") for i in range(6)]),
        ],
        {},
        "must have at most 5 items",
    ),
    (
        "bad-status",
        [rjob("job-1"), rjob("job-2", depends_on=[("job-1", "Running")])],
        {},
        'Unsupported value: "Running"',
    ),
]


@pytest.mark.parametrize(("case", "rjs", "spec", "message"), WEBHOOK, ids=[w[0] for w in WEBHOOK])
def test_c7_6_webhook_rejects_bad_depends_on(
    case: str, rjs: list[dict[str, Any]], spec: dict[str, Any], message: str
) -> None:
    obj = jobset_json("js", rjs, **spec)
    problems = validate_raw("js", obj["spec"])
    assert any(message in text for _, text in problems), problems


def test_c7_6_the_reconciler_refuses_a_self_reference_the_webhook_let_through() -> None:
    js = make_jobset("js", [rjob("a"), rjob("b", depends_on=[("b", "Ready")])])
    decision = decide(state_of(js))
    assert decision is not None
    assert decision.reason.startswith(
        "InvalidJobSet: ns/js: spec.replicatedJobs[1].dependsOn[0].name: replicatedJob: b "
        "cannot depend on itself"
    )
    patch = js_status(decision)
    assert conditions(patch)["Failed"] == ("True", "InvalidJobSet")
    assert patch["terminalState"] == "Failed"
    assert created_jobs(decision) == []


def test_c7_7_in_order_waits_for_each_replicated_job_to_start() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 2), rjob("b", 1)],
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    first = decide(state_of(js))
    assert created_jobs(first) == ["js-a-0", "js-a-1"]
    assert conditions(js_status(first))["StartupPolicyInProgress"] == (
        "True",
        "InOrderStartupPolicyInProgress",
    )
    half = decide(state_of(js, child(js, "a", 0, READY), child(js, "a", 1, RUNNING)))
    assert created_jobs(half) == []  # a not ready: b not created
    started = decide(state_of(js, child(js, "a", 0, READY), child(js, "a", 1, READY)))
    assert created_jobs(started) == ["js-b-0"]
    done = make_jobset(
        "js",
        [rjob("a", 2), rjob("b", 1)],
        startupPolicy={"startupPolicyOrder": "InOrder"},
        status={"conditions": js_status(first)["conditions"]},
    )
    everything = [
        child(done, "a", 0, READY),
        child(done, "a", 1, READY),
        child(done, "b", 0, READY),
    ]
    final = conditions(js_status(decide(state_of(done, *everything))))
    assert final["StartupPolicyCompleted"] == ("True", "InOrderStartupPolicyCompleted")
    assert final["StartupPolicyInProgress"][0] == "False"  # mutually exclusive


def test_c7_7_in_order_suspended_creates_everything_and_orders_the_resume() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json(
            "js",
            [rjob("a", 1), rjob("b", 1)],
            startupPolicy={"startupPolicyOrder": "InOrder"},
            suspend=True,
        )
    )
    world.run()
    assert sorted(world.jobs()) == ["js-a-0", "js-b-0"]  # all created, suspended, unordered
    assert "StartupPolicyInProgress" not in world.conditions()  # none while suspended
    world.update(world.jobset(), suspend=False)
    world.settle()
    assert world.jobs()["js-a-0"].spec["suspend"] is False
    assert world.jobs()["js-b-0"].spec["suspend"] is True
    assert world.conditions()["StartupPolicyInProgress"] == "True"
    world.run(lambda: world.jobs()["js-b-0"].spec["suspend"] is False)
    world.run(lambda: world.conditions().get("StartupPolicyCompleted") == "True")
    assert world.conditions()["Suspended"] == "False"


def test_c7_7_suspend_keeps_in_order_jobs_suspended() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json(
            "js", [rjob("a", 1), rjob("b", 1)], startupPolicy={"startupPolicyOrder": "InOrder"}
        )
    )
    world.run(lambda: "js-b-0" in world.jobs())
    world.update(world.jobset(), suspend=True)
    world.run()
    assert all(j.spec["suspend"] is True for j in world.jobs().values())
    assert world.live_pods() == []
    assert world.conditions()["Suspended"] == "True"
