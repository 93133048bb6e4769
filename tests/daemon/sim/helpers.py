"""Request bodies and a raw HTTP call shared by the simulated-cluster tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from daemon.sim.store import Store, WatchEvent, encode


def pod_body(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def job_body(name: str, *, suspend: bool = False, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "suspend": suspend,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
            **spec,
        },
    }


@contextmanager
def unchanged_once_stored(store: Store) -> Iterator[None]:
    """Fail if any object the store wrote changed afterwards. Versions share what they did
    not change, so none may change once stored: each event's object must still be what was
    sent for it."""
    events: list[WatchEvent] = []
    store.listeners.append(events.append)
    yield
    changed = [e for e in events if encode(e.obj) != e.data]
    assert not changed, f"stored objects changed after the write: {changed[:3]}"


@dataclass(frozen=True)
class Answer:
    """One HTTP answer of the simulated API server, its body decoded."""

    status: int
    body: Any
    headers: CIMultiDictProxy[str]


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> Answer:
    """A raw request (a JSON body unless it is already bytes)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"Content-Type": content_type, "Accept": accept}
    async with http.request(method, path, data=data, headers=headers) as resp:
        return Answer(resp.status, await resp.json(content_type=None), resp.headers)
