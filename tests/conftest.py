"""Shared fixtures. Async tests run on anyio's pytest plugin, on asyncio only: the Kubernetes
client (kubernetes-asyncio, aiohttp) is asyncio-only."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from daemon.service import logs, wiring
from tests.backends import BACKENDS, backend_params, stop_planes
from tests.processes import cache_bytecode

# Before the test modules are collected: see `tests.processes.BYTECODE_CACHE`.
cache_bytecode()

# Every test folds as the daemon does: with the controllers' hooks.
wiring.wire()

# Tests configure logging again and again in one process (the CLI run in process, the log
# tests) and capture it: a logger cached on first use would keep the configuration of
# whichever test used it first, and a later test capturing its lines would see none.
logs.cache_loggers = False


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """Each test leaves logging as it found it: a level or output one test configured (the
    CLI run in process sets the daemon's) must not filter what a later one captures."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> str:
    """Each integration scenario taking this runs on the simulated cluster and on the real
    control plane of every supported Kubernetes release (`tests.backends`)."""
    return str(request.param)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_planes()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The scenario × backend matrix of the tests that ran on the backends."""
    rows: dict[str, dict[str, str]] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if "[" not in nodeid or getattr(report, "when", "call") not in ("call", "setup"):
                continue
            test, _, param = nodeid.partition("[")
            param = param.rstrip("]")
            if param not in BACKENDS:
                continue
            if report.when == "setup" and outcome == "passed":
                continue
            rows.setdefault(test, {})[param] = outcome
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section("scenario x backend")
    width = max(len(t.split("::")[-1]) for t in rows)
    write(" ".join([f"{'scenario':<{width}}", *(f"{b:>10}" for b in BACKENDS)]))
    for test in sorted(rows):
        cells = [f"{rows[test].get(b, '-'):>10}" for b in BACKENDS]
        write(" ".join([f"{test.split('::')[-1]:<{width}}", *cells]))
