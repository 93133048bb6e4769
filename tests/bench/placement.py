"""Placement: a 1,000-pod gang on 10,000 nodes per algorithm, and how time scales from
1,000 to 10,000 nodes (the same rack shape, ten times the blocks)."""

from __future__ import annotations

import time

from daemon.placement.model import Algorithm, NodeInfo, PodSetRequest
from daemon.placement.place import place
from events.topology import DEFAULT_LEVELS
from tests.bench.table import Table

BLOCK, RACK, HOST = DEFAULT_LEVELS
GPU = "nvidia.com/gpu"
GANG = 1_000
CASES: list[tuple[Algorithm, str, PodSetRequest]] = [
    ("BestFit", "required block", PodSetRequest("gang", GANG, {GPU: 1}, required=BLOCK)),
    ("BestFit", "preferred rack", PodSetRequest("gang", GANG, {GPU: 1}, preferred=RACK)),
    (
        "LeastFreeCapacity",
        "unconstrained",
        PodSetRequest("gang", GANG, {GPU: 1}, unconstrained=True),
    ),
    (
        "BalancedPlacement",
        "preferred rack",
        PodSetRequest("gang", GANG, {GPU: 1}, preferred=RACK),
    ),
]


def nodes(count: int, hosts_per_rack: int = 16, racks_per_block: int = 40) -> list[NodeInfo]:
    """`count` 8-GPU hosts; every fourth host already runs 4 GPUs of other work."""
    result = []
    for i in range(count):
        rack = i // hosts_per_rack
        block = rack // racks_per_block
        result.append(
            NodeInfo(
                name=f"n{i}",
                labels={BLOCK: f"b{block}", RACK: f"r{rack}", HOST: f"n{i}"},
                allocatable={"cpu": 96_000, "memory": 1 << 40, GPU: 8, "pods": 110},
                used={GPU: 4, "pods": 1} if i % 4 == 0 else {},
            )
        )
    return result


def _best_of(
    runs: int, algorithm: Algorithm, topology: list[NodeInfo], pod_set: PodSetRequest
) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        result = place(DEFAULT_LEVELS, topology, [pod_set], algorithm)
        best = min(best, time.perf_counter() - start)
        assert result.admitted, result.reason
    return best


def run(table: Table) -> None:
    small, large = nodes(1_000), nodes(10_000)
    for algorithm, mode, pod_set in CASES:
        at_small = _best_of(5, algorithm, small, pod_set)
        at_large = _best_of(5, algorithm, large, pod_set)
        table.add(
            f"place: {GANG}-pod gang, {algorithm} ({mode}), 10k nodes", f"{at_large * 1000:.0f} ms"
        )
        ratio = at_large / at_small
        table.add(
            f"place: {algorithm} ({mode}) time(10k)/time(1k) nodes",
            f"{ratio:.1f}",
            "≈ 10 (linear)",
            ratio < 15,
        )
