"""The campaign's short version, inside `make test`: one run of every load fault at once on the
simulated cluster, one of each restart of the real control plane, and one of the fault
proxy's faults in front of it (`make chaos` runs each fault on its own, several times)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from tests.backends import require_go
from tests.chaos.campaign import FAULTS, run
from tests.chaos.load import SHORT

pytestmark = pytest.mark.anyio


async def test_every_fault_at_once_breaks_no_invariant(tmp_path: Path) -> None:
    (everything,) = [f for f in FAULTS if f.name == "everything"]
    result = await run(everything, seed=7, tmp=tmp_path, size=SHORT)
    # Each fault struck: a run they all missed would prove nothing.
    struck = {"drop-watch", "stall-watch", "expire-history", "error-409", "error-429"}
    struck |= {"error-500", "drop-request", "latency-spell", "sigkill"}
    assert struck <= set(result.injected), result.injected
    assert result.violations == []


# What the fault proxy strikes in front of the real kube-apiserver.
PROXIED: Final = {"drop-watch", "stall-watch", "error-409", "error-429", "error-500"} | {
    "drop-request",
    "latency-spell",
}


@pytest.mark.real
@pytest.mark.parametrize(
    ("name", "struck"),
    [
        ("etcd-restarted", {"etcd-restart"}),
        ("kube-apiserver-restarted", {"kube-apiserver-restart"}),
        ("leader-killed-real", {"sigkill-leader"}),
        ("api-faults-real", PROXIED),
    ],
)
async def test_faults_on_the_real_control_plane_break_no_invariant(
    name: str, struck: set[str], tmp_path: Path
) -> None:
    require_go()
    (fault,) = [f for f in FAULTS if f.name == name]
    result = await run(fault, seed=7, tmp=tmp_path, size=SHORT)
    assert result.skipped == ""
    assert struck <= set(result.injected), result.injected
    # etcd's record was read past the run's start: objects were created and changed.
    assert {"ADDED", "MODIFIED"} <= set(result.changes), result.changes
    assert result.violations == []
