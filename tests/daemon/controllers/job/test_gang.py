"""The gang a Job gets (`daemon.controllers.job.gang`): which Jobs, what their objects say,
and the order a Job's sync makes them in (Workload; then PodGroup and pods)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from daemon.controllers.job.gang import gang_for
from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.job.spec import JobSpecError, view_job
from daemon.controllers.workloads import V1ALPHA2, V1BETA1, GroupTemplate
from events.fold import fold
from events.objects import Job, OwnerRef
from events.schema import Resynced
from tests.daemon.controllers.builders import JOB_UID, make_job, make_state
from tests.daemon.controllers.world import JobWorld

RACK = "topology.kubernetes.io/rack"
INDEXED = {"completion_mode": "Indexed", "parallelism": 4, "completions": 4}


def _gang(**spec: Any) -> dict[str, Any]:
    return {"schedulingPolicy": {"gang": spec}}


@pytest.mark.parametrize(
    ("version", "infer", "spec", "template"),
    [
        pytest.param(V1BETA1, False, {}, None, id="no-opt-in"),
        pytest.param(None, True, {"scheduling": _gang()}, None, id="not-served"),
        pytest.param(
            V1BETA1,
            False,
            {"scheduling": _gang(), "parallelism": 8},
            GroupTemplate("job-pgt-0", 8),
            id="gang-defaults-to-parallelism",
        ),
        pytest.param(
            V1BETA1,
            False,
            {
                "scheduling": {
                    **_gang(minCount=3),
                    "schedulingConstraints": {"topology": [{"key": RACK}]},
                    "disruptionMode": {"all": {}},
                },
                "parallelism": 4,
            },
            GroupTemplate("job-pgt-0", 3, RACK, "all"),
            id="constraints-and-disruption",
        ),
        pytest.param(
            V1BETA1,
            False,
            {"scheduling": {}},
            GroupTemplate("job-pgt-0", None),
            id="scheduling-without-policy-is-basic",
        ),
        pytest.param(
            V1ALPHA2, True, INDEXED, GroupTemplate("job-pgt-0", 4), id="1.36-inferred-gang"
        ),
        pytest.param(
            V1ALPHA2,
            True,
            {**INDEXED, "completions": 8},
            None,
            id="1.36-completions-unlike-parallelism",
        ),
        pytest.param(
            V1ALPHA2, True, {"parallelism": 4, "completions": 4}, None, id="1.36-not-indexed"
        ),
        pytest.param(
            V1ALPHA2, True, {**INDEXED, "parallelism": 1, "completions": 1}, None, id="1.36-one-pod"
        ),
        pytest.param(
            V1BETA1, True, {"parallelism": 1}, GroupTemplate("job-pgt-0", None), id="1.37-basic"
        ),
    ],
)
def test_gang_for(
    version: str | None, infer: bool, spec: dict[str, Any], template: GroupTemplate | None
) -> None:
    gang = gang_for(view_job(make_job(**spec)), version, infer)
    assert (gang.template if gang else None) == template
    if gang is not None:
        assert gang.version == version
        assert gang.workload.startswith("job-")
        assert gang.podgroup.startswith(f"{gang.workload}-job-pgt-0-")


def test_the_pods_priority_class_is_the_groups_where_the_api_takes_it() -> None:
    job = make_job(scheduling=_gang(minCount=2), parallelism=2)
    template = {
        **job.spec["template"],
        "spec": {**job.spec["template"]["spec"], "priorityClassName": "high"},
    }
    view = view_job(msgspec.structs.replace(job, spec={**job.spec, "template": template}))
    assert gang_for(view, V1BETA1, False).template.priority_class_name == "high"  # type: ignore[union-attr]
    assert gang_for(view, V1ALPHA2, False).template.priority_class_name is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(make_job(scheduling=_gang(), parallelism=2, **{}), id="own-podgroup"),
        pytest.param(None, id="owned-by-a-jobset"),
    ],
)
def test_no_gang_for_a_job_someone_else_groups(job: Job | None) -> None:
    if job is None:
        job = msgspec.structs.replace(
            make_job(scheduling=_gang(), parallelism=2),
            owners=(OwnerRef("JobSet", "set", "uid-set", True),),
        )
    else:
        template = {**job.spec["template"]}
        template["spec"] = {**template["spec"], "schedulingGroup": {"podGroupName": "mine"}}
        job = msgspec.structs.replace(job, spec={**job.spec, "template": template})
    assert gang_for(view_job(job), V1BETA1, True) is None


def test_a_cronjobs_job_stands_alone() -> None:
    job = msgspec.structs.replace(
        make_job(scheduling=_gang(), parallelism=2),
        owners=(OwnerRef("CronJob", "nightly", "uid-cron", True),),
    )
    assert gang_for(view_job(job), V1BETA1, False) is not None


@pytest.mark.parametrize(
    ("scheduling", "names"),
    [
        pytest.param(
            {"schedulingPolicy": {"gang": {}, "basic": {}}}, "schedulingPolicy", id="both"
        ),
        pytest.param(_gang(minCount=0), "minCount", id="min-count"),
        pytest.param(
            {"schedulingConstraints": {"topology": [{"key": RACK}, {"key": "zone"}]}},
            "topology",
            id="two-levels",
        ),
        pytest.param({"disruptionMode": {"all": {}}}, "disruptionMode", id="all-needs-a-gang"),
    ],
)
def test_a_scheduling_it_cannot_make_objects_from_is_named(
    scheduling: dict[str, Any], names: str
) -> None:
    with pytest.raises(JobSpecError, match=names):
        gang_for(view_job(make_job(scheduling=scheduling, parallelism=2)), V1BETA1, False)


def test_a_job_name_too_long_for_the_template_is_refused_with_the_reason() -> None:
    job = make_job("j" * 58, scheduling=_gang(), parallelism=2)
    with pytest.raises(JobSpecError, match="longer than 63 characters"):
        gang_for(view_job(job), V1BETA1, False)


# -- the sync ----------------------------------------------------------------------------------


def _world(version: str = V1BETA1, rec: JobReconciler | None = None, **spec: Any) -> JobWorld:
    state = make_state(make_job(**spec))
    for kind in ("Workload", "PodGroup"):
        resynced = Resynced(
            at=0, cluster="c1", kind=kind, resource_version="1", api_version=version
        )
        fold(state, state.seq + 1, resynced)
    return JobWorld(state, rec=rec or JobReconciler())


def _group_of(world: JobWorld) -> set[str]:
    return {(world.state.pods[k].pod_group or "-") for k in world.state.pods}


@pytest.mark.parametrize("version", [V1BETA1, V1ALPHA2])
def test_the_workload_then_the_podgroup_and_pods(version: str) -> None:
    world = _world(version, scheduling=_gang(minCount=2), parallelism=2, completions=2)
    first = world.step()
    assert first is not None
    assert [i.kind for i in first.intents if type(i).__name__ == "Create"] == ["Workload"]
    assert first.reason.startswith("WorkloadCreated:")
    assert "startTime" not in world.status  # not started before its pods can be made
    second = world.step()
    assert second is not None
    kinds = [i.kind for i in second.intents if type(i).__name__ == "Create"]
    assert kinds == ["PodGroup", "Pod", "Pod"]
    workload = next(iter(world.state.workloads.values()))
    group = next(iter(world.state.podgroups.values()))
    assert workload.controller is not None
    assert workload.controller.uid == JOB_UID
    assert [(o.kind, o.controller) for o in group.owners] == [("Job", True), ("Workload", False)]
    assert _group_of(world) == {group.name}
    assert world.status.get("startTime")


def test_a_suspended_job_gets_its_objects_and_no_pods() -> None:
    world = _world(scheduling=_gang(), parallelism=2, suspend=True)
    world.settle()
    assert len(world.state.workloads) == 1
    assert len(world.state.podgroups) == 1
    assert not world.state.pods


def test_a_job_that_started_without_a_workload_runs_ungrouped() -> None:
    world = _world(
        scheduling=_gang(),
        parallelism=2,
        status={"startTime": "2026-01-01T00:00:00Z", "active": 0},
    )
    world.settle()
    assert not world.state.workloads
    assert _group_of(world) == {"-"}
    assert any("ungrouped" in d.reason for d in world.decisions)


def test_infer_is_the_setting() -> None:
    off = _world(V1ALPHA2, **INDEXED)
    off.settle()
    assert not off.state.workloads
    on = _world(V1ALPHA2, JobReconciler(workload_with_job=True), **INDEXED)
    on.settle()
    assert len(on.state.podgroups) == 1
    [group] = on.state.podgroups.values()
    assert _group_of(on) == {group.name}
