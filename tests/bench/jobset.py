"""What one pod failure costs a 10,000-pod JobSet (1,250 Jobs x 8 pods on 10,000 nodes) under
each restart strategy: pod deletions, pod creations and API calls kbatchd makes until the
JobSet has recovered, and how long that took in simulated time.

It runs kbatchd's own reconcilers (JobSet and Job) on the in-memory world of the unit tests
(`tests.daemon.controllers.world`: fold, garbage collector, kubelet, upstream's
in-place restart agent), so every number is what the daemon would decide, without the noise
of a loopback API server at this size. Simulated-time assumptions: a new pod is running 10 s
after its create (scheduling, image, init), an in-place restart takes 3 s (same node, sandbox
and images), a deleted pod terminates in 5 s, an agent reacts in 0.5 s; API calls themselves
take no time. "Recovered" means: RestartJobSet — every Job of the new attempt runs all its pods
ready; RestartJob — the failed Job's replacement does; in-place — every pod reported the new
attempt and is ready (the barrier is down).

`python -m tests.bench.jobset` runs it alone; `run(table)` adds its rows to `make bench`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.jobset.reconciler import JobSetReconciler
from tests.bench.table import Table
from tests.daemon.controllers.builders import SECOND
from tests.daemon.controllers.jobset_builders import jobset_json, rjob
from tests.daemon.controllers.world import JobSetWorld

NODES: Final = 10_000
JOBS: Final = 1_250
PODS_PER_JOB: Final = 8
TARGET_RATIO: Final = 100.0
MAX_INT32: Final = 2**31 - 1
# The ready_decrease_grace_seconds an in-place restart at this size is measured with besides
# the default (0, upstream's): the pods' 3 s restart fits in it.
GRACE_MS: Final = 10_000


@dataclass(frozen=True)
class Result:
    strategy: str
    calls: int
    # Of those, Job status writes: the Job controller reporting counts and readiness (an
    # in-place restart still takes every pod through not-ready and back).
    job_status_calls: int
    pods_created: int
    pods_deleted: int
    recovery_ms: int
    wall_s: float


def _world(failure_policy: dict[str, Any], *, grace_ms: int = 0, **job: Any) -> JobSetWorld:
    """`grace_ms`: the Job controller's ready_decrease_grace (0, its default, is upstream's)."""
    world = JobSetWorld(
        nodes=NODES,
        start_ms=10 * SECOND,
        restart_ms=3 * SECOND,
        terminate_ms=5 * SECOND,
        agent_ms=SECOND // 2,
        reconcilers=[
            JobSetReconciler(),
            JobReconciler(backoff_base_ms=SECOND, ready_decrease_grace_ms=grace_ms),
        ],
    )
    # Two replicatedJobs of 625: upstream allows RestartJob only up to 1,024 replicas each.
    half = JOBS // 2
    world.create_jobset(
        jobset_json(
            "js",
            [
                rjob(name, half, parallelism=PODS_PER_JOB, completions=PODS_PER_JOB, **job)
                for name in ("w", "x")
            ],
            failurePolicy=failure_policy,
        )
    )
    return world


def _all_ready(world: JobSetWorld) -> bool:
    pods = world.live_pods()
    return len(pods) == JOBS * PODS_PER_JOB and all(p.ready for p in pods)


def _measure(
    strategy: str,
    world: JobSetWorld,
    ready: Callable[[], bool],
    fail: Callable[[JobSetWorld], Callable[[], bool]],
) -> Result:
    world.run(ready, limit_ms=3_600_000)
    calls, created, deleted = world.calls.total, world.calls.pods_created, world.calls.pods_deleted
    job_status = world.calls.by["patch Job/status"]
    began = time.perf_counter()
    recovered = fail(world)
    took = world.run(recovered, limit_ms=3_600_000)
    return Result(
        strategy,
        world.calls.total - calls,
        world.calls.by["patch Job/status"] - job_status,
        world.calls.pods_created - created,
        world.calls.pods_deleted - deleted,
        took,
        time.perf_counter() - began,
    )


def _fail_a_pod(world: JobSetWorld) -> str:
    """The first pod of Job w-317 fails (backoffLimit 0: its Job fails)."""
    victim = next(p for p in world.live_pods() if p.owners[0].name == "js-w-317")
    world.finish_pod(victim.name, exit_code=1)
    return victim.owners[0].name


def restart_jobset() -> Result:
    world = _world({"maxRestarts": 3}, backoffLimit=0)

    def fail(world: JobSetWorld) -> Callable[[], bool]:
        _fail_a_pod(world)
        return lambda: (
            world.jobset().status.get("restarts") == 1
            and _all_ready(world)
            and all(
                j.labels.get("jobset.sigs.k8s.io/restart-attempt") == "1"
                for j in world.jobs().values()
            )
        )

    return _measure("RestartJobSet (Recreate)", world, lambda: _all_ready(world), fail)


def restart_job() -> Result:
    world = _world({"maxRestarts": 3, "rules": [{"action": "RestartJob"}]}, backoffLimit=0)

    def fail(world: JobSetWorld) -> Callable[[], bool]:
        job = _fail_a_pod(world)
        old = world.jobs()[job].uid
        return lambda: job in world.jobs() and world.jobs()[job].uid != old and _all_ready(world)

    return _measure("RestartJob", world, lambda: _all_ready(world), fail)


def in_place(grace_ms: int = 0) -> Result:
    world = _world(
        {"maxRestarts": 3, "restartStrategy": "InPlaceRestart"},
        grace_ms=grace_ms,
        backoffLimit=MAX_INT32,
        podReplacementPolicy="Failed",
    )

    def fail(world: JobSetWorld) -> Callable[[], bool]:
        world.restart_in_place(world.live_pods()[4_321].name)
        return lambda: (
            world.jobset().status.get("currentInPlaceRestartAttempt") == 1
            and (world.in_place_synced())
        )

    name = "InPlaceRestart" if not grace_ms else f"InPlaceRestart, ready grace {grace_ms // 1000} s"
    return _measure(name, world, world.in_place_synced, fail)


def run(table: Table) -> None:
    print(
        f"jobset: one pod failure in a {JOBS:,} Jobs x {PODS_PER_JOB} pods JobSet "
        f"on {NODES:,} nodes",
        flush=True,
    )
    results = [restart_jobset(), restart_job(), in_place(), in_place(GRACE_MS)]
    baseline = results[0]
    for result in results:
        table.add(
            f"jobset {result.strategy}: pods deleted / created",
            f"{result.pods_deleted:,} / {result.pods_created:,}",
        )
        table.add(
            f"jobset {result.strategy}: time to recovery (simulated)",
            f"{result.recovery_ms / 1000:.1f} s ({result.wall_s:.1f} s to compute)",
        )
        others = result.calls - result.job_status_calls
        table.add(
            f"jobset {result.strategy}: API calls (of which Job status writes)",
            f"{result.calls:,} ({result.job_status_calls:,})",
        )
        if result is baseline:
            continue
        ratio = baseline.calls / max(result.calls, 1)
        without = (baseline.calls - baseline.job_status_calls) / max(others, 1)
        # In place with upstream's readiness writes (the default), each of the 1,250 Jobs
        # writes its ready drop and rise: a figure of the Job controller's, not a target.
        judged = result.strategy != "InPlaceRestart"
        table.add(
            f"jobset {result.strategy}: API calls, RestartJobSet / this",
            f"{ratio:,.0f}x ({without:,.0f}x without Job status writes)",
            f">= {TARGET_RATIO:.0f}x" if judged else "",
            ratio >= TARGET_RATIO if judged else None,
        )


def main() -> int:
    table = Table()
    run(table)
    print()
    print(table.render())
    return 1 if table.missed else 0


if __name__ == "__main__":
    sys.exit(main())
