"""The campaign's short version, inside `make test`: one run of every load fault at once
(`make chaos` runs each on its own, several times)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
