"""Suspending and resuming a whole JobSet (spec B0 "Suspend/resume")."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from daemon.controllers.jobset.reconciler import JobSetReconciler
from tests.daemon.controllers.builders import CLUSTER
from tests.daemon.controllers.jobset_builders import (
    READY,
    child,
    conditions,
    created_jobs,
    decide,
    job_patches,
    jobset_json,
    js_status,
    make_jobset,
    rjob,
    state_of,
)
from tests.daemon.controllers.world import JobSetWorld


def test_b0_suspending_patches_every_running_child_job() -> None:
    js = make_jobset("js", [rjob("a", 2)], suspend=True)
    running = [child(js, "a", i, READY, suspend=False) for i in range(2)]
    decision = decide(state_of(js, *running))
    assert job_patches(decision) == {
        "js-a-0": {"spec": {"suspend": True}},
        "js-a-1": {"spec": {"suspend": True}},
    }
    assert conditions(js_status(decision))["Suspended"] == ("True", "SuspendedJobs")


def test_b0_new_jobs_of_a_suspended_jobset_are_created_suspended() -> None:
    js = make_jobset("js", [rjob("a", 1)], suspend=True)
    decision = decide(state_of(js))
    assert created_jobs(decision) == ["js-a-0"]
    assert decision is not None
    assert decision.reason.startswith("CreateJobs: creating 1 suspended Job(s)")
    body = decision.intents[-1].body  # type: ignore[union-attr]
    assert body["spec"]["suspend"] is True


def test_b0_suspend_and_resume_a_running_jobset() -> None:
    world = JobSetWorld()
    world.create_jobset(jobset_json("js", [rjob("a", 2, parallelism=2, completions=2)]))
    world.run(lambda: len(world.live_pods()) == 4 and all(p.ready for p in world.live_pods()))
    jobs = {n: j.uid for n, j in world.jobs().items()}
    world.update(world.jobset(), suspend=True)
    world.run(lambda: world.conditions().get("Suspended") == "True" and not world.live_pods())
    assert {n: j.uid for n, j in world.jobs().items()} == jobs  # Jobs suspended, not recreated
    world.update(world.jobset(), suspend=False)
    world.run(lambda: len(world.live_pods()) == 4 and all(p.ready for p in world.live_pods()))
    assert world.conditions()["Suspended"] == "False"
    reasons = {c["type"]: c["reason"] for c in world.jobset().status["conditions"]}
    assert reasons["Suspended"] == "ResumeJobs"
    assert {n: j.uid for n, j in world.jobs().items()} == jobs


@pytest.mark.parametrize(
    ("labels", "dispatching", "runs"),
    [
        ({"kbatchd.dev/multicluster": "true"}, True, False),
        ({}, True, True),
        # The manager is another cluster: here is a worker, where copies run.
        ({"kbatchd.dev/multicluster": "true"}, False, True),
    ],
    ids=["dispatched", "no-label", "worker"],
)
def test_a_jobset_the_dispatcher_handles_on_the_manager_gets_no_job_there(
    labels: dict[str, str], dispatching: bool, runs: bool
) -> None:
    js = replace(make_jobset("js", [rjob("a", 1)]), labels=labels)
    rec = JobSetReconciler(
        dispatch_cluster=CLUSTER if dispatching else "elsewhere",
        dispatch_label="kbatchd.dev/multicluster",
    )
    assert bool(created_jobs(decide(state_of(js), rec=rec))) is runs
