"""Seeded random histories on the in-memory cluster: pods start, succeed, fail (some matching
a pod failure policy), get deleted, held by other finalizers, killed, stuck on a NotReady
node; Jobs get suspended and resumed. Whatever happens, every status write is one the API
server accepts (the cluster checks), the failed counter never goes down, nothing is counted
more often than pods were created, no pod name is used twice, and a finished Job keeps no
finalizer on any pod."""

from __future__ import annotations

import random
from typing import Any

import pytest

from daemon.controllers.job.reconciler import JobReconciler
from tests.daemon.controllers.builders import T0, make_job, make_node, make_state
from tests.daemon.controllers.world import JobWorld

SPECS: list[dict[str, Any]] = [
    {"parallelism": 3, "completions": 5},
    {"parallelism": 2},
    {"parallelism": 3, "completions": 3, "completion_mode": "Indexed"},
    {
        "parallelism": 3,
        "completions": 4,
        "completion_mode": "Indexed",
        "backoff_limit_per_index": 1,
        "max_failed_indexes": 2,
    },
    {"parallelism": 2, "completions": 4, "pod_replacement_policy": "Failed", "backoff_limit": 3},
    {
        "parallelism": 3,
        "completions": 3,
        "completion_mode": "Indexed",
        "success_policy": {"rules": [{"succeededCount": 2}]},
    },
    {
        "parallelism": 2,
        "completions": 3,
        "backoff_limit": 4,
        "pod_failure_policy": {
            "rules": [
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [9]}},
            ]
        },
    },
    {"parallelism": 3, "completions": 6, "active_deadline_seconds": 300},
]


def counted(status: dict[str, Any]) -> tuple[int, int]:
    uncounted = status.get("uncountedTerminatedPods") or {}
    failed = status.get("failed", 0) + len(uncounted.get("failed", []))
    succeeded = status.get("succeeded", 0) + len(uncounted.get("succeeded", []))
    return failed, succeeded


def act(cluster: JobWorld, rnd: random.Random) -> None:
    live = [p for p in cluster.pods() if not p.terminal]
    roll = rnd.random()
    pod = rnd.choice(live) if live else None
    if roll < 0.3:
        cluster.run_all(ready=rnd.random() < 0.8)
    elif roll < 0.5 and pod is not None and pod.phase == "Running":
        cluster.set_phase(pod.name, "Succeeded")
    elif roll < 0.65 and pod is not None and pod.phase == "Running":
        cluster.set_phase(pod.name, "Failed", exit_codes={"main": rnd.choice([1, 3, 9])})
    elif roll < 0.72 and pod is not None:
        if rnd.random() < 0.5:
            cluster.hold(pod.name)
        cluster.user_delete(pod.name)
    elif roll < 0.8:
        cluster.kubelet_kill()
    elif roll < 0.85:
        for held in cluster.pods():
            if "example.com/hold" in held.finalizers:
                cluster.remove_finalizer(held.name, "example.com/hold")
    elif roll < 0.88:
        cluster.update_job(suspend=not cluster.job.spec.get("suspend", False))
    elif roll < 0.91:
        cluster.set_node_ready("n1", rnd.random() < 0.5)
    elif cluster.decisions and cluster.decisions[-1].requeue_at is not None:
        cluster.advance_to_requeue()


@pytest.mark.parametrize("block", range(4), ids=lambda b: f"seeds-{b * 50}-{b * 50 + 49}")
def test_random_histories_keep_the_accounting_invariants(block: int) -> None:
    for seed in range(block * 50, block * 50 + 50):
        rnd = random.Random(seed)
        rec = JobReconciler(stuck_terminating_after_ms=rnd.choice([None, 30_000]))
        state = make_state(make_job(**rnd.choice(SPECS)), nodes=[make_node("n1")])
        cluster = JobWorld(state, rec=rec)
        cluster.now = T0
        previous = (0, 0)
        for _ in range(150):
            cluster.settle(limit=60)
            failed, succeeded = counted(cluster.status)
            assert failed >= previous[0], f"seed {seed}: failed went down"
            assert failed + succeeded <= len(cluster.created), f"seed {seed}: over-counted"
            assert len(set(cluster.created)) == len(cluster.created), f"seed {seed}: name reused"
            previous = (failed, succeeded)
            finished = {"Complete", "Failed"} & {
                t for t, s in cluster.conditions().items() if s == "True"
            }
            if finished:
                cluster.settle()
                assert all(rec.finalizer not in p.finalizers for p in cluster.pods()), seed
                break
            cluster.advance(rnd.choice([100, 1000, 5000, 20000]))
            act(cluster, rnd)
