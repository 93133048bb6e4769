"""The controllers of kube-controller-manager that the API semantics depend on: the garbage
collector (ownerReferences with background and foreground propagation, dangling owners)
and the namespace controller (deleting a namespace deletes its content first).

Like the real ones they run after the request that triggered them has been answered: work is
queued from store events and processed on the next turn of the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib

from daemon.sim.errors import ApiError
from daemon.sim.registry import FOREGROUND, DeleteOptions, Registry
from daemon.sim.resources import NAMESPACES, RESOURCES, Resource
from daemon.sim.store import Store, Stored, WatchEvent

_BACKGROUND = DeleteOptions(propagation="Background")


class GarbageCollector:
    def __init__(self, store: Store, registry: Registry):
        self.store = store
        self.registry = registry
        self._queue: dict[tuple[str, str], None] = {}
        self._scheduled = False
        store.listeners.append(self._on_event)

    def _enqueue(self, kind: str, key: str) -> None:
        self._queue[(kind, key)] = None
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # outside the loop (set-up code): processed on the next event in the loop
        self._scheduled = True
        loop.call_soon(self.run)

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.type == "DELETED":
            if meta["uid"] in self.store.dependents:
                self._enqueue("owner-gone", meta["uid"])
            for ref in meta.get("ownerReferences") or ():
                self._enqueue("foreground", ref.get("uid", ""))
            namespace = meta.get("namespace")
            if namespace:
                ns = self.store.get(NAMESPACES, "", namespace)
                if ns is not None and ns.obj["metadata"].get("deletionTimestamp"):
                    self._enqueue("namespace", namespace)
            return
        if meta.get("deletionTimestamp"):
            if FOREGROUND in (meta.get("finalizers") or ()):
                self._enqueue("foreground", meta["uid"])
            if event.resource is NAMESPACES:
                self._enqueue("namespace", meta["name"])
        if event.type == "ADDED" and meta.get("ownerReferences"):
            self._enqueue("dangling", meta["uid"])

    def run(self) -> None:
        """Process everything queued so far (also callable directly from tests)."""
        self._scheduled = False
        work, self._queue = list(self._queue), {}
        for kind, key in work:
            with contextlib.suppress(ApiError):
                if kind in ("owner-gone",):
                    for dependent in self.store.dependents_of(key):
                        self._collect(dependent)
                elif kind == "dangling":
                    stored = self.store.by_uid(key)
                    if stored is not None:
                        self._collect(stored)
                elif kind == "foreground":
                    self._foreground(key)
                elif kind == "namespace":
                    self._namespace(key)

    def _resource_of(self, stored: Stored) -> Resource | None:
        found = self.store.uids.get(stored.obj["metadata"]["uid"])
        return found[0] if found else None

    def _owner_alive(self, uid: str) -> bool:
        owner = self.store.by_uid(uid)
        if owner is None:
            return False
        meta = owner.obj["metadata"]
        # An owner being deleted in the foreground still counts until its dependents go.
        return not meta.get("deletionTimestamp") or FOREGROUND in (meta.get("finalizers") or ())

    def _collect(self, dependent: Stored) -> None:
        """Delete a dependent whose owners are all gone; drop references to gone owners."""
        meta = dependent.obj["metadata"]
        resource = self._resource_of(dependent)
        if resource is None or meta.get("deletionTimestamp"):
            return
        refs = meta.get("ownerReferences") or []
        present = [r for r in refs if self.store.by_uid(r.get("uid", "")) is not None]
        if not present:
            self.registry.delete(resource, meta.get("namespace", ""), meta["name"], _BACKGROUND)
        elif len(present) != len(refs):
            obj = dependent.copy()
            obj["metadata"]["ownerReferences"] = present
            self.registry.update(resource, meta.get("namespace", ""), meta["name"], obj)

    def _foreground(self, uid: str) -> None:
        owner = self.store.by_uid(uid)
        if owner is None:
            return
        meta = owner.obj["metadata"]
        if not meta.get("deletionTimestamp") or FOREGROUND not in (meta.get("finalizers") or ()):
            return
        blocking = 0
        for dependent in self.store.dependents_of(uid):
            dep_meta = dependent.obj["metadata"]
            refs = dep_meta.get("ownerReferences") or []
            ours = [r for r in refs if r.get("uid") == uid]
            if any(r.get("blockOwnerDeletion") for r in ours):
                blocking += 1
            if dep_meta.get("deletionTimestamp"):
                continue
            resource = self._resource_of(dependent)
            if resource is None:
                continue
            others = [
                r for r in refs if r.get("uid") != uid and self._owner_alive(r.get("uid", ""))
            ]
            if others:
                obj = dependent.copy()
                obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self.registry.update(resource, dep_meta.get("namespace", ""), dep_meta["name"], obj)
                blocking -= 1 if any(r.get("blockOwnerDeletion") for r in ours) else 0
            else:
                self.registry.delete(
                    resource, dep_meta.get("namespace", ""), dep_meta["name"], _BACKGROUND
                )
        if blocking == 0:
            resource = self._resource_of(owner)
            if resource is not None:
                self.registry.remove_finalizer(resource, owner, FOREGROUND)

    def _namespace(self, name: str) -> None:
        ns = self.store.get(NAMESPACES, "", name)
        if ns is None or not ns.obj["metadata"].get("deletionTimestamp"):
            return
        namespaced = [r for r in RESOURCES if r.namespaced]
        for resource in namespaced:
            for stored in list(self.store.iter_objects(resource, name)):
                meta = stored.obj["metadata"]
                if not meta.get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        self.registry.delete(resource, name, meta["name"], _BACKGROUND)
        # Pods in their grace period keep it open; their final deletion brings us back here.
        if not any(True for r in namespaced for _ in self.store.iter_objects(r, name)):
            obj = ns.copy()
            obj.setdefault("spec", {})["finalizers"] = []
            obj.setdefault("status", {})["phase"] = "Terminating"
            self.store.remove(NAMESPACES, "", name, obj)
