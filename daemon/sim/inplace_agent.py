"""Upstream's `in-place-restart-agent` (spec B5.2), emulated for every pod that runs it.

The simulated kubelet runs no images; what a container does is emulated (see
`daemon.sim.agent`). A container (or init container) whose image names
``in-place-restart-agent`` behaves as upstream's agent, which the user adds to the pods of a
JobSet with `restartStrategy: InPlaceRestart`:

- each time it starts (the pod started, or restarted in place) it writes the pod annotation
  `jobset.sigs.k8s.io/in-place-restart-attempt`: the JobSet's `currentInPlaceRestartAttempt`
  + 1, or 0 while that is unset;
- when its attempt is at or below the JobSet's `previousInPlaceRestartAttempt` it exits with
  `IN_PLACE_RESTART_EXIT_CODE` (env, default 1), which the pod's `RestartAllContainers` rule
  turns into an in-place restart of the whole pod (same uid, same node);
- a JobSet annotated `jobset.sigs.k8s.io/disable-in-place-restart`, or not using the
  strategy, makes it a no-op.

The barrier itself (the worker waiting until its attempt equals the current one) changes
nothing the API shows, so it is not emulated. The JobSet controller's half of the protocol is
kbatchd's (`daemon.controllers.jobset.inplace`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from daemon.sim.agent import NodeAgent
from daemon.sim.errors import ApiError
from daemon.sim.registry import MERGE_PATCH, Registry
from daemon.sim.resources import JOBSETS, PODS
from daemon.sim.store import Obj, Store, WatchEvent

log = logging.getLogger(__name__)

IMAGE: Final = "in-place-restart-agent"
ATTEMPT: Final = "jobset.sigs.k8s.io/in-place-restart-attempt"
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
DISABLE: Final = "jobset.sigs.k8s.io/disable-in-place-restart"
EXIT_CODE_ENV: Final = "IN_PLACE_RESTART_EXIT_CODE"


def _agent(spec: Obj) -> Obj | None:
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            if isinstance(container, dict) and IMAGE in str(container.get("image") or ""):
                return container
    return None


def _exit_code(container: Obj) -> int:
    for env in container.get("env") or ():
        if isinstance(env, dict) and env.get("name") == EXIT_CODE_ENV:
            with contextlib.suppress(TypeError, ValueError):
                return int(str(env.get("value")))
    return 1


def _run_of(obj: Obj, name: str) -> tuple[int, str] | None:
    """The agent container's current run: (restartCount, startedAt), None unless running."""
    status = obj.get("status") or {}
    if status.get("phase") != "Running":
        return None
    for field in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(field) or ():
            if cs.get("name") != name:
                continue
            running = (cs.get("state") or {}).get("running")
            if running is None:
                return None
            return int(cs.get("restartCount") or 0), str(running.get("startedAt") or "")
    return None


class InPlaceRestartAgents:
    """Every pod's agent. Reacts on the next turn of the loop (like the real agent, after the
    write that woke it), never inside a store write."""

    def __init__(self, store: Store, registry: Registry, kubelet: NodeAgent) -> None:
        self.store = store
        self.registry = registry
        self.kubelet = kubelet
        # pod uid -> (the agent run that wrote, the attempt it wrote).
        self._wrote: dict[str, tuple[tuple[int, str], int]] = {}
        self._pods: dict[str, None] = {}
        self._jobsets: dict[str, None] = {}
        self._scheduled = False

    def start(self) -> None:
        self.store.listeners.append(self._on_event)

    def stop(self) -> None:
        if self._on_event in self.store.listeners:
            self.store.listeners.remove(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource is PODS:
            if event.type == "DELETED":
                self._wrote.pop(event.obj["metadata"].get("uid", ""), None)
            elif _agent(event.obj.get("spec") or {}) is not None:
                self._pods[event.key] = None
                self._kick()
        elif event.resource is JOBSETS and event.type == "MODIFIED":
            self._jobsets[event.key] = None
            self._kick()

    def _kick(self) -> None:
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._scheduled = True
        loop.call_soon(self.run)

    def run(self) -> None:
        self._scheduled = False
        pods, self._pods = list(self._pods), {}
        jobsets, self._jobsets = list(self._jobsets), {}
        for key in jobsets:
            namespace, _, name = key.partition("/")
            for stored in self.store.iter_objects(PODS, namespace):
                labels = stored.obj["metadata"].get("labels") or {}
                if labels.get(JOBSET_NAME) == name:
                    pods.append(f"{namespace}/{stored.obj['metadata']['name']}")
        for key in dict.fromkeys(pods):
            with contextlib.suppress(ApiError):
                self._pod(key)

    def _jobset(self, pod: Obj) -> Obj | None:
        meta = pod["metadata"]
        name = (meta.get("labels") or {}).get(JOBSET_NAME) or (meta.get("annotations") or {}).get(
            JOBSET_NAME
        )
        if not name:
            return None
        stored = self.store.get(JOBSETS, meta.get("namespace", ""), name)
        if stored is None:
            return None
        js = stored.obj
        strategy = ((js.get("spec") or {}).get("failurePolicy") or {}).get("restartStrategy")
        if strategy != "InPlaceRestart" or DISABLE in (js["metadata"].get("annotations") or {}):
            return None  # bypass: the agent lets the worker run and does nothing else
        return js

    def _pod(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        stored = self.store.get(PODS, namespace, name)
        if stored is None or stored.obj["metadata"].get("deletionTimestamp"):
            return
        pod = stored.obj
        container = _agent(pod.get("spec") or {})
        js = self._jobset(pod)
        if container is None or js is None:
            return
        run = _run_of(pod, str(container.get("name")))
        if run is None:
            return
        uid = pod["metadata"]["uid"]
        status: dict[str, Any] = js.get("status") or {}
        wrote = self._wrote.get(uid)
        if wrote is None or wrote[0] != run:
            current = status.get("currentInPlaceRestartAttempt")
            attempt = 0 if current is None else int(current) + 1
            self.registry.patch(
                PODS,
                namespace,
                name,
                MERGE_PATCH,
                {"metadata": {"uid": uid, "annotations": {ATTEMPT: str(attempt)}}},
            )
            self._wrote[uid] = (run, attempt)
            return  # the annotation's own event brings the pod back here
        previous = status.get("previousInPlaceRestartAttempt")
        if previous is not None and wrote[1] <= int(previous):
            log.debug("sim in-place agent: %s at attempt %s restarts in place", key, wrote[1])
            self.kubelet.exit_containers(namespace, name, _exit_code(container))
