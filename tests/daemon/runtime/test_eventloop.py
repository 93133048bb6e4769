from __future__ import annotations

import sys

import pytest

from daemon.runtime import eventloop


async def _loop_name(prefix: str) -> str:
    return prefix + eventloop.name()


@pytest.mark.parametrize(
    ("uvloop_importable", "expected"),
    [(True, "loop: uvloop"), (False, "loop: asyncio")],
    ids=["uvloop-installed", "uvloop-missing"],
)
def test_run_takes_uvloop_when_it_is_installed(
    monkeypatch: pytest.MonkeyPatch, uvloop_importable: bool, expected: str
) -> None:
    if not uvloop_importable:
        monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` fail
    assert eventloop.uvloop_installed() is uvloop_importable
    assert eventloop.run(_loop_name, "loop: ") == expected
