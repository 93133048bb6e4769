"""The event loop kbatchd's processes run on: uvloop's where it is installed (a dependency on
every platform but Windows, which uvloop does not support), asyncio's own elsewhere.

The daemon's hot path is the network. At 15,000 gang workloads it makes about 110,000 API
calls and reads about 330,000 watch events, and asyncio's transports, handles and timers,
which are Python code, were about a tenth of its CPU; uvloop has them in C over libuv. The
simulated cluster serves those calls and streams, so it runs on the same loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, Unpack

import anyio

T = TypeVar("T")
Args = TypeVarTuple("Args")


def uvloop_installed() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run(func: Callable[[Unpack[Args]], Awaitable[T]], *args: *Args) -> T:
    """`anyio.run` on uvloop when it is installed."""
    return anyio.run(func, *args, backend_options={"use_uvloop": uvloop_installed()})


def name() -> str:
    """Which loop the running code is on: ``uvloop`` or ``asyncio``."""
    module = type(asyncio.get_running_loop()).__module__
    return module.split(".", 1)[0]
