"""What the real-plane run records of the pods it made fail, against a stand-in for the
control plane (the plane itself runs in the real tier's chaos runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos.load import INDEX, JOB_NAME, Load
from tests.chaos.plane import PlaneCluster

pytestmark = pytest.mark.anyio


class _Plane:
    """The plane's record, as `PlaneCluster` reads it: every pod as it ends."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []

    def revision(self) -> int:
        return 1

    def objects_at(self, revision: int = 0) -> list[tuple[int, dict[str, Any]]]:
        return [(2, pod) for pod in self.pods]


def _pod(uid: str, index: int, phase: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": f"job-a-{uid}",
            "uid": uid,
            "resourceVersion": "5",
            "labels": {JOB_NAME: "job-a"},
            "annotations": {INDEX: str(index)},
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("ended", "failed", "unapplied"),
    [
        ("Failed", {"job-a": [1, 3]}, 0),
        # The patch was answered 200, yet the pod succeeded: no failure, no replacement owed.
        ("Succeeded", {"job-a": [1]}, 1),
    ],
)
async def test_a_pod_made_to_fail_counts_as_failed_only_if_it_did_not_succeed(
    ended: str, failed: dict[str, list[int]], unapplied: int, tmp_path: Path
) -> None:
    plane = _Plane()
    cluster = PlaneCluster(plane, Load(fail_once={"job-a": {1, 3}}), 4.0, tmp_path)  # type: ignore[arg-type]

    async def patched(*_: Any, **__: Any) -> tuple[int, Any]:
        return 200, {}

    cluster._request = patched  # type: ignore[method-assign]
    for uid, index in (("u1", 1), ("u3", 3)):
        await cluster._fail_if_chosen(_pod(uid, index, "Running"))
    assert cluster.failed == {"job-a": [1, 3]}
    plane.pods = [_pod("u1", 1, "Failed"), _pod("u3", 3, ended)]
    struck = await cluster.lift()
    assert cluster.failed == failed
    assert struck["pod failure not applied"] == unapplied
