"""A simulated cluster on its own event loop in a background thread, for synchronous code
(the official `kubernetes` client, kubectl subprocesses) that must not block the loop it
talks to."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from daemon.sim.cluster import SimCluster

T = TypeVar("T")


class BackgroundSim:
    """``with BackgroundSim(topology=..., seed=...) as sim:`` — `sim` is the `SimCluster`;
    touch its store only through `call`, which runs a function on the cluster's loop."""

    def __init__(self, **kwargs: Any):
        self._kwargs = kwargs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sim", daemon=True)
        self.sim: SimCluster | None = None

    def __enter__(self) -> SimCluster:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._open(), self._loop)
        self.sim = future.result(timeout=30)
        return self.sim

    async def _open(self) -> SimCluster:
        sim = SimCluster(**self._kwargs)
        await sim.open()
        return sim

    def call(self, fn: Callable[[], T]) -> T:
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return future.result(timeout=30)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.sim is not None:
            asyncio.run_coroutine_threadsafe(self.sim.close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
