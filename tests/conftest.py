"""Shared fixtures. Async tests run on anyio's pytest plugin, on asyncio only: the Kubernetes
client (kubernetes-asyncio, aiohttp) is asyncio-only."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
