"""One benchmark section, run in a process of its own by `tests.bench` (`make bench`)."""

from __future__ import annotations

import importlib
import inspect

from daemon.runtime import eventloop
from tests.bench.table import Row, Table


def run_section(name: str) -> list[Row]:
    """Run the section `tests.bench.NAME` and hand back its rows."""
    table = Table()
    run = importlib.import_module(f"tests.bench.{name}").run
    if inspect.iscoroutinefunction(run):
        eventloop.run(run, table)
    else:
        run(table)
    return table.rows
