"""Spec B6 / C11.1–C11.2: exclusive placement of a JobSet's child Jobs, default strategy, as
kbatchd's Job reconciler shapes and polices the pods it creates (`controllers.job.exclusive`)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from daemon.controllers.job.exclusive import priority_label
from daemon.controllers.jobset.spec import (
    EXCLUSIVE_TOPOLOGY,
    JOB_KEY,
    JOBSET_NAME,
    NODE_SELECTOR_STRATEGY,
)
from events.intents import Create, Delete, Patch
from events.objects import Node, Pod
from tests.daemon.controllers.builders import (
    REC,
    T0,
    T0_TEXT,
    creates,
    deletes,
    key,
    make_job,
    make_pod,
    make_state,
)

RACK = "cloud.provider.com/topology-rack"
PRIORITY = "jobset.sigs.k8s.io/priority"
EXCLUSIVE = {JOBSET_NAME: "js", EXCLUSIVE_TOPOLOGY: RACK}
NODES = [
    Node(name="n1", uid="uid-n1", rv="1", ready=True, labels={RACK: "r1"}),
    Node(name="n2", uid="uid-n2", rv="1", ready=True, labels={RACK: "r2"}),
    Node(name="bare", uid="uid-bare", rv="1", ready=True),
]


def _job(notes: dict[str, str] = EXCLUSIVE, active: int = 0, ready: int = 0) -> Any:
    """A 3-pod child Job whose observed status counts `active` and `ready` pods."""
    return make_job(
        "js-w-0",
        parallelism=3,
        completions=3,
        completion_mode="Indexed",
        template_labels={JOB_KEY: "key-w-0"},
        template_annotations=notes,
        status={"startTime": T0_TEXT, "active": active, "terminating": 0, "ready": ready},
    )


def _pod(job: Any, index: int, node: str, *, selector: str | None = None, **kw: Any) -> Pod:
    pod = make_pod(job, f"p{index}", index=index, node=node, **kw)
    if selector is not None:
        pod = msgspec.structs.replace(pod, node_selector={RACK: selector})
    return pod


def _decide(job: Any, pods: list[Pod]) -> Any:
    decision = REC.decide(make_state(job, pods, NODES), key(job), T0)
    assert decision is not None
    return decision


def _created(decision: Any) -> dict[int, dict[str, Any]]:
    made: list[Create] = creates(decision.intents)
    return {int(c.body["metadata"]["annotations"][COMPLETION]): c.body for c in made}


COMPLETION = "batch.kubernetes.io/job-completion-index"


def test_c11_1_the_leader_comes_first_with_affinity_and_anti_affinity() -> None:
    decision = _decide(_job(), [])
    bodies = _created(decision)
    assert list(bodies) == [0]
    leader = bodies[0]
    assert leader["metadata"]["labels"][PRIORITY] == "0"
    affinity = leader["spec"]["affinity"]
    (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert together == {
        "labelSelector": {
            "matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": ["key-w-0"]}]
        },
        "topologyKey": RACK,
        "namespaceSelector": {},
    }
    (apart,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert apart == {
        "labelSelector": {
            "matchExpressions": [
                {"key": JOB_KEY, "operator": "Exists"},
                {"key": JOB_KEY, "operator": "NotIn", "values": ["key-w-0"]},
                {"key": PRIORITY, "operator": "In", "values": ["0"]},
            ]
        },
        "topologyKey": RACK,
        "namespaceSelector": {},
    }
    assert "ExclusivePlacement: holding 2 follower pod(s) until the leader is bound" in (
        decision.reason
    )


@pytest.mark.parametrize(
    ("leader_node", "waiting"),
    [
        pytest.param("", "leader pod p0 is not bound to a node yet", id="leader-unbound"),
        pytest.param("bare", f"node bare has no label {RACK}", id="node-without-the-label"),
    ],
)
def test_c11_1_followers_wait_for_a_bound_leader(leader_node: str, waiting: str) -> None:
    job = _job(active=1)
    decision = _decide(job, [_pod(job, 0, leader_node)])
    assert decision.intents == ()
    assert decision.reason == (
        f"ExclusivePlacement: holding 2 follower pod(s) until the leader is bound ({waiting})"
    )


def test_c11_1_followers_follow_the_leader_into_its_domain() -> None:
    job = _job()
    bodies = _created(_decide(job, [_pod(job, 0, "n2")]))
    assert sorted(bodies) == [1, 2]
    for body in bodies.values():
        assert body["spec"]["nodeSelector"] == {RACK: "r2"}
        assert body["metadata"]["labels"][PRIORITY] == "0"
        assert "affinity" not in body["spec"]


def test_b6_node_selector_strategy_leaves_pods_alone() -> None:
    job = _job({**EXCLUSIVE, NODE_SELECTOR_STRATEGY: "true"})
    bodies = _created(_decide(job, []))
    assert sorted(bodies) == [0, 1, 2]
    for body in bodies.values():
        assert PRIORITY not in body["metadata"]["labels"]
        assert "affinity" not in body["spec"]


def test_b6_every_jobset_pod_carries_its_priority() -> None:
    job = _job({JOBSET_NAME: "js"})
    bodies = _created(_decide(job, []))
    assert sorted(bodies) == [0, 1, 2]
    assert {b["metadata"]["labels"][PRIORITY] for b in bodies.values()} == {"0"}
    plain = _created(_decide(_job({}), []))
    assert all(PRIORITY not in b["metadata"]["labels"] for b in plain.values())


@pytest.mark.parametrize(
    ("spec", "label"),
    [({}, "0"), ({"priority": 100}, "100"), ({"priority": -5}, "n5"), ({"priority": True}, "0")],
)
def test_b6_priority_label(spec: dict[str, Any], label: str) -> None:
    assert priority_label(spec) == label


def _violation_pods(job: Any, marked: bool) -> list[Pod]:
    conditions = {"Ready": "True", "DisruptionTarget": "True"} if marked else None
    return [
        _pod(job, 0, "n2", ready=True),
        _pod(job, 1, "n1", selector="r1", ready=True, conditions=conditions),
        _pod(job, 2, "n2", selector="r2", ready=True, conditions=conditions),
    ]


def test_c11_2_misplaced_followers_are_marked_then_all_deleted() -> None:
    job = _job(active=3, ready=3)
    first = _decide(job, _violation_pods(job, marked=False))
    patches = [i for i in first.intents if isinstance(i, Patch)]
    assert [(p.kind, p.name, p.subresource, p.patch_type) for p in patches] == [
        ("Pod", "p1", "status", "strategic"),
        ("Pod", "p2", "status", "strategic"),
    ]
    assert isinstance(patches[0].patch, dict)
    assert patches[0].patch["metadata"] == {"uid": "uid-p1"}
    (condition,) = patches[0].patch["status"]["conditions"]
    assert {k: condition[k] for k in ("type", "status", "reason", "message")} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "ExclusivePlacementViolation",
        "message": "Pod violated JobSet exclusive placement policy",
    }
    assert not any(isinstance(i, Delete | Create) for i in first.intents)
    assert first.reason.startswith(f"ExclusivePlacementViolation: leader pod is in {RACK}=r2")

    second = _decide(job, _violation_pods(job, marked=True))
    assert deletes(second.intents) == ["p1", "p2"]
    assert creates(second.intents) == []


def test_c11_2_followers_in_the_leaders_domain_stay() -> None:
    job = _job(active=3, ready=3)
    pods = [
        _pod(job, 0, "n2", ready=True),
        _pod(job, 1, "n2", selector="r2", ready=True),
        _pod(job, 2, "n2", selector="r2", ready=True),
    ]
    assert REC.decide(make_state(job, pods, NODES), key(job), T0) is None
