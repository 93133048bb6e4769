"""Intents: what a reconciler wants done to a cluster, recorded in the log before it is done.

Each intent names its target fully (cluster, kind, namespace, name) and carries what makes it
safe to repeat: deterministic names for creates, uid/resourceVersion preconditions for
deletes and patches.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class _Intent(msgspec.Struct, frozen=True, array_like=True, gc=False, tag_field="op"):
    cluster: str
    kind: str
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.cluster}/{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        """The target's key in its state table, ``cluster/namespace/name``."""
        return f"{self.cluster}/{self.namespace}/{self.name}"


class Create(_Intent, frozen=True, tag="create"):
    body: dict[str, Any] = {}


class Patch(_Intent, frozen=True, tag="patch"):
    patch: dict[str, Any] | list[Any] = {}
    patch_type: Literal["merge", "strategic", "json"] = "merge"
    subresource: str = ""
    precondition_rv: str = ""


class Delete(_Intent, frozen=True, tag="delete"):
    precondition_uid: str = ""
    grace_seconds: int | None = None
    propagation: Literal["Background", "Foreground", "Orphan"] = "Background"


class Bind(_Intent, frozen=True, tag="bind"):
    node: str = ""
    uid: str = ""


Intent = Create | Patch | Delete | Bind
