"""Request bodies shared by the simulated-cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
