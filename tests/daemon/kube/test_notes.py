"""The Kubernetes Events a decision announces: one table row per kind of intent and condition,
each read against the object as the state holds it."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.kube.notes import Involved, Note, notes_for
from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import Job, JobSet, Pod, PodGroup
from events.schema import Decided
from events.state import State

C, NS = "c1", "ns"
JOB = Involved(C, "Job", NS, "train", "uid-job")
JOBSET = Involved(C, "JobSet", NS, "set", "uid-js")
GROUP = Involved(C, "PodGroup", NS, "g", "uid-pg")
# The group's member waiting for a node (g-1 is bound).
WAITING = Involved(C, "Pod", NS, "g-0", "uid-p0")


def cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def state(
    job_status: dict[str, Any] | None = None,
    jobset_conditions: list[dict[str, Any]] | None = None,
    group_conditions: list[dict[str, Any]] | None = None,
) -> State:
    world = State()
    world.jobs[f"{C}/{NS}/train"] = Job(
        name="train",
        namespace=NS,
        uid="uid-job",
        spec={"completions": 2},
        status=job_status or {},
    )
    world.jobsets[f"{C}/{NS}/set"] = JobSet(
        name="set", namespace=NS, uid="uid-js", status={"conditions": jobset_conditions or []}
    )
    world.podgroups[f"{C}/{NS}/g"] = PodGroup(
        name="g", namespace=NS, uid="uid-pg", status={"conditions": group_conditions or []}
    )
    world.pods[f"{C}/{NS}/g-0"] = Pod(name="g-0", namespace=NS, uid="uid-p0", pod_group="g")
    world.pods[f"{C}/{NS}/g-1"] = Pod(
        name="g-1", namespace=NS, uid="uid-p1", pod_group="g", node_name="node-1"
    )
    world.group_members[f"{C}/{NS}/g"] = {f"{C}/{NS}/g-0", f"{C}/{NS}/g-1"}
    return world


def job_status(*conditions: dict[str, Any], **fields: Any) -> Patch:
    status = {**fields, "conditions": list(conditions)}
    return Patch(C, "Job", NS, "train", patch={"status": status}, subresource="status")


def jobset_status(*conditions: dict[str, Any]) -> Patch:
    status = {"conditions": list(conditions)}
    return Patch(C, "JobSet", NS, "set", patch={"status": status}, subresource="status")


def group_status(*conditions: dict[str, Any]) -> Patch:
    status = {"conditions": list(conditions)}
    return Patch(
        C,
        "PodGroup",
        NS,
        "g",
        patch={"status": status},
        patch_type="strategic",
        subresource="status",
    )


SUSPENDED = cond("Suspended", "True", "JobSuspended", "Job suspended")
RESUMED = cond("Suspended", "False", "JobResumed", "Job resumed")
COMPLETE = cond(
    "Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods"
)
BACKOFF = cond(
    "Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
)
UNFIT = cond("PodGroupScheduled", "False", "Unschedulable", "InsufficientRoom: 4 pod(s) ...")
TIMEOUT = cond("PodGroupScheduled", "False", "PodsReadyTimeout", "1 of minCount 2 pod(s) ready")
ADMITTED = cond("PodGroupScheduled", "True", "Scheduled", "2 pod(s) bound to 1 node(s)")


def row(
    id_: str,
    reconciler: str,
    key: str,
    intents: list[Intent],
    expected: list[Note],
    world: State | None = None,
    reason: str = "",
) -> Any:
    return pytest.param(reconciler, key, intents, world or state(), reason, expected, id=id_)


CASES = [
    row(
        "job-creates-and-deletes-pods",
        "job",
        f"Job/{C}/{NS}/train",
        [Create(C, "Pod", NS, "train-a"), Delete(C, "Pod", NS, "train-b", precondition_uid="u")],
        [
            Note(0, JOB, "Normal", "SuccessfulCreate", "Created pod: train-a"),
            Note(0, JOB, "Warning", "FailedCreate", "Error creating: ", True),
            Note(1, JOB, "Normal", "SuccessfulDelete", "Deleted pod: train-b"),
            Note(1, JOB, "Warning", "FailedDelete", "Error deleting: ", True),
        ],
    ),
    row(
        "job-suspended",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(SUSPENDED)],
        [Note(0, JOB, "Normal", "Suspended", "Job suspended")],
    ),
    row(
        "job-already-suspended-announces-nothing",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(SUSPENDED, active=0)],
        [],
        state({"conditions": [SUSPENDED]}),
    ),
    row(
        "job-resumed",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(RESUMED)],
        [Note(0, JOB, "Normal", "Resumed", "Job resumed")],
        state({"conditions": [SUSPENDED]}),
    ),
    row(
        "job-never-suspended-is-not-resumed",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(RESUMED)],
        [],
    ),
    row(
        "job-completed",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(COMPLETE, succeeded=2)],
        [
            Note(
                0,
                JOB,
                "Normal",
                "Completed",
                "Job completed",
                milestone="Job completed",
                why="CompletionsReached",
            )
        ],
    ),
    row(
        "job-completed-with-too-many-succeeded",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(COMPLETE, succeeded=3)],
        [
            Note(
                0,
                JOB,
                "Warning",
                "TooManySucceededPods",
                "Too many succeeded pods running after completion count reached",
            ),
            Note(
                0,
                JOB,
                "Normal",
                "Completed",
                "Job completed",
                milestone="Job completed",
                why="CompletionsReached",
            ),
        ],
    ),
    row(
        "job-failed-with-the-conditions-reason",
        "job",
        f"Job/{C}/{NS}/train",
        [job_status(BACKOFF)],
        [
            Note(
                0,
                JOB,
                "Warning",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                milestone="Job failed",
            )
        ],
    ),
    row(
        "job-gone-announces-nothing",
        "job",
        f"Job/{C}/{NS}/other",
        [Create(C, "Pod", NS, "other-a")],
        [],
    ),
    row(
        "job-pod-finalizer-release-announces-nothing",
        "job",
        f"Job/{C}/{NS}/train",
        [Patch(C, "Pod", NS, "train-a", patch={"metadata": {"finalizers": None}})],
        [],
    ),
    row(
        "jobset-resumed",
        "jobset",
        f"JobSet/{C}/{NS}/set",
        [jobset_status(cond("Suspended", "False", "ResumeJobs", "jobset is resumed"))],
        [Note(0, JOBSET, "Normal", "ResumeJobs", "jobset is resumed")],
        state(
            jobset_conditions=[cond("Suspended", "True", "SuspendedJobs", "jobset is suspended")]
        ),
    ),
    row(
        "jobset-completed",
        "jobset",
        f"JobSet/{C}/{NS}/set",
        [
            jobset_status(
                cond("Completed", "True", "AllJobsCompleted", "jobset completed successfully")
            )
        ],
        [
            Note(
                0,
                JOBSET,
                "Normal",
                "AllJobsCompleted",
                "jobset completed successfully",
                milestone="JobSet completed",
            )
        ],
    ),
    row(
        "jobset-failed",
        "jobset",
        f"JobSet/{C}/{NS}/set",
        [jobset_status(cond("Failed", "True", "FailedJobs", "jobset failed due to one or more"))],
        [
            Note(
                0,
                JOBSET,
                "Warning",
                "FailedJobs",
                "jobset failed due to one or more",
                milestone="JobSet failed",
            )
        ],
    ),
    row(
        "jobset-failed-creates",
        "jobset",
        f"JobSet/{C}/{NS}/set",
        [Create(C, "Job", NS, "set-w-0"), Create(C, "Service", NS, "set")],
        [
            Note(0, JOBSET, "Warning", "JobCreationFailed", "", True),
            Note(1, JOBSET, "Warning", "HeadlessServiceCreationFailed", "", True),
        ],
    ),
    row(
        "gang-unschedulable",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [group_status(UNFIT)],
        [
            Note(0, GROUP, "Warning", "FailedScheduling", "InsufficientRoom: 4 pod(s) ..."),
            Note(0, WAITING, "Warning", "FailedScheduling", "InsufficientRoom: 4 pod(s) ..."),
        ],
    ),
    row(
        "gang-waiting-for-members-is-not-said-on-the-pods",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [group_status({**UNFIT, "message": "NotEnoughMembers: waiting for minCount 4"})],
        [Note(0, GROUP, "Warning", "FailedScheduling", "NotEnoughMembers: waiting for minCount 4")],
    ),
    row(
        "gang-unschedulable-for-another-reason-again",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [group_status(UNFIT)],
        [
            Note(0, GROUP, "Warning", "FailedScheduling", "InsufficientRoom: 4 pod(s) ..."),
            Note(0, WAITING, "Warning", "FailedScheduling", "InsufficientRoom: 4 pod(s) ..."),
        ],
        state(group_conditions=[{**UNFIT, "message": "NotEnoughMembers: waiting"}]),
    ),
    row(
        "gang-admitted-binds-each-pod",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [Bind(C, "Pod", NS, "g-0", "node-1", "uid-p0"), group_status(ADMITTED)],
        [
            Note(
                1,
                GROUP,
                "Normal",
                "Scheduled",
                "2 pod(s) bound to 1 node(s)",
                milestone="gang admitted",
            ),
            Note(
                0,
                Involved(C, "Pod", NS, "g-0", "uid-p0"),
                "Normal",
                "Scheduled",
                f"Successfully assigned {NS}/g-0 to node-1",
            ),
        ],
        state(group_conditions=[UNFIT]),
    ),
    row(
        "gang-evicted-members-are-preempted",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [Delete(C, "Pod", NS, "g-0", precondition_uid="uid-p0"), group_status(TIMEOUT)],
        [
            Note(
                1, GROUP, "Warning", "PodsReadyTimeout", "1 of minCount 2 pod(s) ready", False, ""
            ),
            Note(
                0,
                Involved(C, "Pod", NS, "g-0", "uid-p0"),
                "Normal",
                "Preempted",
                "Preempted by kbatchd: PodsReadyTimeout: 1 of minCount 2 pod(s) ready",
            ),
        ],
        state(group_conditions=[ADMITTED]),
    ),
    row(
        "gang-preemption-victims-name-the-preemptor",
        "gang",
        f"PodGroup/{C}/{NS}/hi",
        [Delete(C, "Pod", NS, "lo-0", precondition_uid="uid-lo0")],
        [
            Note(
                0,
                Involved(C, "Pod", NS, "lo-0", "uid-lo0"),
                "Normal",
                "Preempted",
                f"Preempted by podgroup {NS}/hi",
            )
        ],
        reason="WaitingForPreemption: 1 victim pod(s) still to go, 1 deleted now",
    ),
    row(
        "gang-given-up",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [
            group_status(
                cond("PodGroupScheduled", "False", "RequeuingLimitExceeded", "evicted 3 time(s)")
            )
        ],
        [
            Note(
                0,
                GROUP,
                "Warning",
                "RequeuingLimitExceeded",
                "evicted 3 time(s)",
                milestone="gang not requeued",
            )
        ],
        state(group_conditions=[TIMEOUT]),
    ),
    row(
        "gang-pods-ready-condition-announces-nothing",
        "gang",
        f"PodGroup/{C}/{NS}/g",
        [group_status(cond("PodsReady", "True", "Started", "minCount pods ready"))],
        [],
    ),
    row(
        "another-reconciler-announces-nothing",
        "exclusive",
        f"Job/{C}/{NS}/train",
        [Create(C, "Pod", NS, "train-a")],
        [],
    ),
]


@pytest.mark.parametrize(("reconciler", "key", "intents", "world", "reason", "expected"), CASES)
def test_notes_for(
    reconciler: str,
    key: str,
    intents: list[Intent],
    world: State,
    reason: str,
    expected: list[Note],
) -> None:
    decision = Decided(at=0, reconciler=reconciler, key=key, reason=reason, intents=tuple(intents))
    assert notes_for(world, decision) == expected
