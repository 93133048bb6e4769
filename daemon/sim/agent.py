"""The node agent: a stand-in for kube-scheduler (for pods of the default scheduler) and for
the kubelet of every node (KWOK-style), moving pods through their phases on timers.

Pods say how they behave through annotations:

- ``sim.kbatchd.dev/run-seconds``: how long the containers run (default: until deleted);
- ``sim.kbatchd.dev/exit-code``: the exit code of the containers when they stop (default 0);
- ``sim.kbatchd.dev/ready-seconds``: delay from start until the pod is Ready (default 0);
- ``sim.kbatchd.dev/terminating-seconds``: how long a deleted pod stays terminating
  (default: its grace period).

Container restarts follow the pod's ``restartPolicy``, per-container ``restartPolicy`` and
``restartPolicyRules`` (KEP-5307), including the ``RestartAllContainers`` action (KEP-5532):
the pod keeps its UID and node, every container's ``restartCount`` goes up.

All delays are simulated seconds divided by the time scale. Each pod has at most a couple of
`loop.call_later` timers; nothing polls.
"""

from __future__ import annotations

import asyncio
import logging
import math
import operator
from collections.abc import Callable
from typing import Any, Final

import msgspec

from daemon.sim.errors import ApiError
from daemon.sim.registry import DeleteOptions, Registry
from daemon.sim.resources import NODES, PODS
from daemon.sim.scheduling import NodeInfo, fits, node_info, pod_affinity_ok, pod_requests
from daemon.sim.store import Obj, Store, Stored, WatchEvent, encode, object_key

log = logging.getLogger(__name__)

RUN_SECONDS: Final = "sim.kbatchd.dev/run-seconds"
EXIT_CODE: Final = "sim.kbatchd.dev/exit-code"
READY_SECONDS: Final = "sim.kbatchd.dev/ready-seconds"
TERMINATING_SECONDS: Final = "sim.kbatchd.dev/terminating-seconds"
DEFAULT_SCHEDULER: Final = "default-scheduler"
UNREACHABLE: Final = "node.kubernetes.io/unreachable"
_KILLED_EXIT: Final = 143  # SIGTERM
_BACKOFF_BASE: Final = 10.0
_BACKOFF_MAX: Final = 300.0
# Timers due within the same tick fire together, at its end: never early, at most this late.
_TICK: Final = 0.001


class _Timer(msgspec.Struct):
    key: str
    what: str
    due: float  # loop time
    action: Callable[[str], None]


_DUE: Final = operator.attrgetter("due")


def _cond(type_: str, status: bool, now: str, reason: str = "") -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": type_,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason:
        condition["reason"] = reason
    return condition


def _set_conditions(status: Obj, updates: list[dict[str, Any]]) -> None:
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    for update in updates:
        for i, c in enumerate(conditions):
            if c.get("type") == update["type"]:
                if c.get("status") == update["status"] and c.get("reason") == update.get("reason"):
                    update = c  # unchanged: keep the transition time
                conditions[i] = update
                break
        else:
            conditions.append(update)
    status["conditions"] = conditions


def _set_running(info: NodeInfo, key: str, requests: dict[str, int], *, running: bool) -> None:
    if running == (key in info.running):
        return
    sign = 1 if running else -1
    if running:
        info.running.add(key)
    else:
        info.running.discard(key)
    for k, v in requests.items():
        info.running_used[k] = info.running_used.get(k, 0) + sign * v


def _status_copy(stored: Stored) -> Obj:
    """The pod to change before a status write, sharing all but its status with the stored
    version: read it, change only the status.

    The status is copied two levels deep, which is all the agent changes: it sets keys of the
    status and of each container's status, and replaces anything deeper without changing it.
    """
    status = dict(stored.obj.get("status") or {})
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if isinstance(statuses, list):
            status[key] = [dict(s) if isinstance(s, dict) else s for s in statuses]
    return {**stored.obj, "status": status}


def _annotation_seconds(meta: Obj, key: str) -> float | None:
    raw = (meta.get("annotations") or {}).get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("sim agent: pod %s: %s=%r is not a number", meta.get("name"), key, raw)
        return None
    return max(0.0, value)


def _exit_code(meta: Obj) -> int:
    raw = (meta.get("annotations") or {}).get(EXIT_CODE, "0")
    try:
        return int(raw)
    except ValueError:
        return 1


def _rule_action(container: Obj, code: int) -> str | None:
    for rule in container.get("restartPolicyRules") or ():
        exit_codes = rule.get("exitCodes") or {}
        values = exit_codes.get("values") or []
        op = exit_codes.get("operator")
        if (op == "In" and code in values) or (op == "NotIn" and code not in values):
            return str(rule.get("action"))
    return None


def _restarts(policy: str, code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and code != 0)


class NodeAgent:
    """Kubelet and default scheduler of the simulated cluster."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        time_scale: float = 1.0,
        start_seconds: float = 1.0,
        not_ready_fail_seconds: float | None = None,
    ):
        if time_scale <= 0:
            raise ValueError(f"time scale must be positive, got {time_scale!r}")
        self.store = store
        self.registry = registry
        self.time_scale = time_scale
        self.start_seconds = start_seconds
        # None: pods on a NotReady node stay as they are; else they fail after this long.
        self.not_ready_fail_seconds = not_ready_fail_seconds
        self.nodes: dict[str, NodeInfo] = {}
        self._alloc: dict[str, tuple[str, dict[str, int]]] = {}  # pod key -> node, requests
        self._timers: dict[tuple[str, str], _Timer] = {}  # (pod key, what) -> the live timer
        self._ticks: dict[int, tuple[asyncio.TimerHandle, list[_Timer]]] = {}
        self._pending: dict[str, None] = {}  # unbound default-scheduler pods, in arrival order
        self._arrived: dict[str, None] = {}  # pending pods not yet tried
        self._freed = False  # capacity may have appeared since the last scheduling pass
        self._dirty_pods: dict[str, None] = {}
        self._dirty_nodes: dict[str, None] = {}
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ip = 0

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.store.listeners.append(self._on_event)
        for stored in self.store.iter_objects(NODES):
            self.nodes[stored.obj["metadata"]["name"]] = node_info(stored.obj, None)
        for stored in self.store.iter_objects(PODS):
            self._account(stored.obj, deleted=False)
            self._dirty_pods[self._key(stored.obj)] = None
        self._kick()

    def stop(self) -> None:
        if self._on_event in self.store.listeners:
            self.store.listeners.remove(self._on_event)
        for handle, _ in self._ticks.values():
            handle.cancel()
        self._ticks.clear()
        self._timers.clear()

    def _delay(self, seconds: float) -> float:
        return seconds / self.time_scale

    def _later(self, key: str, what: str, seconds: float, action: Callable[[str], None]) -> None:
        """Run `action(key)` after `seconds` (simulated), in place of any `what` timer the pod
        has. Timers due in the same tick share one loop timer: thousands of pods bound
        together come due together."""
        assert self._loop is not None
        due = self._loop.time() + self._delay(seconds)
        timer = _Timer(key, what, due, action)
        self._timers[(key, what)] = timer
        tick = math.ceil(due / _TICK)
        batch = self._ticks.get(tick)
        if batch is None:
            self._ticks[tick] = (self._loop.call_at(tick * _TICK, self._fire, tick), [timer])
        else:
            batch[1].append(timer)

    def _fire(self, tick: int) -> None:
        _, timers = self._ticks.pop(tick)
        timers.sort(key=_DUE)
        for timer in timers:
            if self._timers.get((timer.key, timer.what)) is not timer:
                continue  # cancelled, or planned anew
            del self._timers[(timer.key, timer.what)]
            try:
                timer.action(timer.key)
            except ApiError as exc:
                # The pod changed under us (deleted, conflict): its next event re-plans it.
                log.debug("sim agent: %s %s: %s", timer.what, timer.key, exc)

    def _cancel(self, key: str, *whats: str) -> None:
        # A cancelled timer stays in its tick's batch and is skipped when the tick comes.
        for what in whats or ("start", "ready", "finish", "restart", "terminate", "lost"):
            self._timers.pop((key, what), None)

    def _has(self, key: str, what: str) -> bool:
        return (key, what) in self._timers

    @staticmethod
    def _key(obj: Obj) -> str:
        meta = obj["metadata"]
        return object_key(meta.get("namespace", ""), meta["name"])

    def _kick(self) -> None:
        if self._scheduled or self._loop is None:
            return
        self._scheduled = True
        self._loop.call_soon(self._process)

    # -- events -----------------------------------------------------------------------------

    def _on_event(self, event: WatchEvent) -> None:
        # Runs inside the write that caused it: only bookkeeping here, actions come later.
        if event.resource is PODS:
            self._account(event.obj, deleted=event.type == "DELETED")
            key = event.key
            if event.type == "DELETED":
                self._cancel(key)
                self._pending.pop(key, None)
                self._arrived.pop(key, None)
            else:
                self._dirty_pods[key] = None
            self._kick()
        elif event.resource is NODES:
            name = event.obj["metadata"]["name"]
            if event.type == "DELETED":
                info = self.nodes.pop(name, None)
                if info is not None:
                    self._dirty_pods.update(dict.fromkeys(info.pods))
            else:
                self.nodes[name] = node_info(event.obj, self.nodes.get(name))
                self._dirty_nodes[name] = None
                self._freed = True
            self._kick()

    def _account(self, obj: Obj, *, deleted: bool) -> None:
        """Keep each node's used capacity in step with the pods bound to it."""
        key = self._key(obj)
        node = (obj.get("spec") or {}).get("nodeName") or ""
        phase = (obj.get("status") or {}).get("phase")
        counted = bool(node) and not deleted and phase not in ("Succeeded", "Failed")
        previous = self._alloc.get(key)
        if previous is not None and (not counted or previous[0] != node):
            old_info = self.nodes.get(previous[0])
            if old_info is not None:
                for k, v in previous[1].items():
                    old_info.used[k] = old_info.used.get(k, 0) - v
                old_info.pods.discard(key)
                _set_running(old_info, key, previous[1], running=False)
            del self._alloc[key]
            self._freed = True
        if counted and (previous is None or previous[0] != node):
            requests = pod_requests(obj.get("spec") or {})
            self._alloc[key] = (node, requests)
            info = self.nodes.get(node)
            if info is not None:
                for k, v in requests.items():
                    info.used[k] = info.used.get(k, 0) + v
                info.pods.add(key)
        elif bool(node) and not deleted:
            info = self.nodes.get(node)
            if info is not None:
                info.pods.add(key)
        if counted:
            info = self.nodes.get(node)
            if info is not None:
                _set_running(info, key, self._alloc[key][1], running=phase == "Running")
        if deleted and node:
            info = self.nodes.get(node)
            if info is not None:
                info.pods.discard(key)

    def _process(self) -> None:
        self._scheduled = False
        nodes, self._dirty_nodes = list(self._dirty_nodes), {}
        for name in nodes:
            info = self.nodes.get(name)
            if info is not None:
                self._dirty_pods.update(dict.fromkeys(info.pods))
        pods, self._dirty_pods = list(self._dirty_pods), {}
        for key in pods:
            namespace, _, name = key.partition("/")
            stored = self.store.get(PODS, namespace, name)
            if stored is not None:
                try:
                    self._reconcile(key, stored)
                except ApiError as exc:
                    log.debug("sim agent: %s: %s", key, exc)
        if self._pending and (self._freed or self._arrived):
            # Pods tried before only get another chance when capacity may have appeared.
            keys = list(self._pending) if self._freed else list(self._arrived)
            self._freed = False
            self._arrived = {}
            self._schedule_pending(keys)

    # -- scheduling -------------------------------------------------------------------------

    def _schedule_pending(self, keys: list[str]) -> None:
        """First fit, in node name order, for each waiting default-scheduler pod."""
        order = sorted(self.nodes)
        unfit: set[bytes] = set()  # pods shaped like one that fit nowhere in this pass
        for key in keys:
            if key not in self._pending:
                continue
            namespace, _, name = key.partition("/")
            stored = self.store.get(PODS, namespace, name)
            spec = (stored.obj.get("spec") or {}) if stored else {}
            if stored is None or spec.get("nodeName") or not self._schedulable(stored.obj):
                self._pending.pop(key, None)
                continue
            requests = pod_requests(spec)
            shape = encode(
                [
                    sorted(requests.items()),
                    *(spec.get(k) for k in ("nodeSelector", "tolerations", "affinity")),
                ]
            )
            if shape in unfit:
                continue
            for node_name in order:
                info = self.nodes[node_name]
                if fits(info, spec, requests) and pod_affinity_ok(
                    stored.obj, info, self.nodes.values(), self._pod_of
                ):
                    self._pending.pop(key, None)
                    target = {"target": {"kind": "Node", "name": node_name}}
                    self.registry.bind(namespace, name, target)
                    break
            else:
                unfit.add(shape)

    def _pod_of(self, key: str) -> Obj | None:
        namespace, _, name = key.partition("/")
        stored = self.store.get(PODS, namespace, name)
        return stored.obj if stored is not None else None

    @staticmethod
    def _schedulable(obj: Obj) -> bool:
        spec = obj.get("spec") or {}
        return (
            spec.get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
            and not spec.get("schedulingGates")
            and not obj["metadata"].get("deletionTimestamp")
        )

    # -- kubelet ----------------------------------------------------------------------------

    def _reconcile(self, key: str, stored: Stored) -> None:
        obj = stored.obj
        meta, spec = obj["metadata"], obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase", "Pending")
        node = spec.get("nodeName")
        if not node:
            if self._schedulable(obj) and phase == "Pending" and key not in self._pending:
                self._pending[key] = None
                self._arrived[key] = None
            return
        info = self.nodes.get(node)
        if info is None:
            self._cancel(key)
            self._node_gone(key)
            return
        if meta.get("deletionTimestamp"):
            self._cancel(key, "start", "ready", "finish", "restart", "lost")
            if phase in ("Succeeded", "Failed"):
                self._finalize(key)
            elif info.ready and not self._has(key, "terminate"):
                seconds = _annotation_seconds(meta, TERMINATING_SECONDS)
                if seconds is None:
                    seconds = float(meta.get("deletionGracePeriodSeconds") or 0)
                self._later(key, "terminate", seconds, self._terminate)
            elif not info.ready:
                self._cancel(key, "terminate")  # no kubelet to finish it until the node returns
            return
        if phase in ("Succeeded", "Failed"):
            self._cancel(key)
            return
        if not info.ready:
            # The kubelet is gone: nothing progresses; optionally the pod is lost after a while.
            self._cancel(key, "start", "ready", "finish", "restart")
            if self.not_ready_fail_seconds is not None and not self._has(key, "lost"):
                self._later(key, "lost", self.not_ready_fail_seconds, self._lost)
            return
        self._cancel(key, "lost")
        if phase == "Pending" and not self._busy(key):
            self._later(key, "start", self.start_seconds, self._start)
        elif phase == "Running" and not self._busy(key):
            self._plan_running(key, stored.obj)

    def _busy(self, key: str) -> bool:
        return any(self._has(key, w) for w in ("start", "ready", "finish", "restart"))

    def _plan_running(self, key: str, obj: Obj) -> None:
        meta = obj["metadata"]
        status = obj.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        ready_seconds = _annotation_seconds(meta, READY_SECONDS) or 0.0
        if not ready:
            self._later(key, "ready", ready_seconds, self._ready)
        run = _annotation_seconds(meta, RUN_SECONDS)
        if run is not None:
            self._later(key, "finish", run, self._finish)

    def _next_ip(self) -> str:
        self._ip += 1
        return f"10.{(self._ip >> 16) & 255}.{(self._ip >> 8) & 255}.{self._ip & 255}"

    def _write_status(self, stored: Stored, obj: Obj) -> None:
        self.registry.write_status(PODS, stored, obj["status"])

    def _get(self, key: str) -> Stored | None:
        namespace, _, name = key.partition("/")
        return self.store.get(PODS, namespace, name)

    def _container_statuses(
        self, spec: Obj, now: str, old: list[Obj] | None, *, running: bool
    ) -> list[Obj]:
        previous = {c.get("name"): c for c in old or ()}
        statuses = []
        for container in spec.get("containers") or ():
            name = container.get("name")
            before = previous.get(name) or {}
            state: Obj = (
                {"running": {"startedAt": now}}
                if running
                else {"waiting": {"reason": "ContainerCreating"}}
            )
            statuses.append(
                {
                    "name": name,
                    "image": container.get("image", ""),
                    "imageID": f"sim://{container.get('image', '')}",
                    "containerID": f"sim://{name}",
                    "ready": False,
                    "started": running,
                    "restartCount": before.get("restartCount", 0),
                    "state": state,
                    **({"lastState": before["lastState"]} if before.get("lastState") else {}),
                }
            )
        return statuses

    def _init_statuses(self, spec: Obj, now: str) -> list[Obj]:
        statuses = []
        for container in spec.get("initContainers") or ():
            sidecar = container.get("restartPolicy") == "Always"
            state: Obj = (
                {"running": {"startedAt": now}}
                if sidecar
                else {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                }
            )
            statuses.append(
                {
                    "name": container.get("name"),
                    "image": container.get("image", ""),
                    "imageID": f"sim://{container.get('image', '')}",
                    "containerID": f"sim://{container.get('name')}",
                    "ready": sidecar,
                    "started": sidecar,
                    "restartCount": 0,
                    "state": state,
                }
            )
        return statuses

    def _admission(self, key: str, obj: Obj) -> tuple[str, str] | None:
        """The kubelet's own admission: a pod bound to a node it does not fit (by whoever bound
        it) is rejected, as the real kubelet fails it with OutOf<resource> or NodeAffinity."""
        spec = obj.get("spec") or {}
        info = self.nodes.get(spec.get("nodeName") or "")
        if info is None:
            return None
        for k, v in (spec.get("nodeSelector") or {}).items():
            if info.labels.get(k) != v:
                return (
                    "NodeAffinity",
                    "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's "
                    "node affinity/selector",
                )
        alloc = self._alloc.get(key)
        requests = alloc[1] if alloc is not None else pod_requests(spec)
        used = info.running_used
        if key in info.running:  # admitted before: it does not count against itself
            used = {k: n - requests.get(k, 0) for k, n in used.items()}
        for k, v in requests.items():
            capacity = info.allocatable.get(k, 0)
            if used.get(k, 0) + v > capacity:
                return (
                    f"OutOf{k}",
                    f"Pod was rejected: Node didn't have enough resource: {k}, requested: {v}, "
                    f"used: {used.get(k, 0)}, capacity: {capacity}",
                )
        return None

    def _start(self, key: str) -> None:
        stored = self._get(key)
        if stored is None or stored.obj["metadata"].get("deletionTimestamp"):
            return
        obj = _status_copy(stored)
        spec, status = obj.get("spec") or {}, obj.setdefault("status", {})
        if status.get("phase", "Pending") != "Pending":
            return
        rejection = self._admission(key, obj)
        if rejection is not None:
            self._fail(key, *rejection, None)
            return
        now = self.store.now()
        ready = (_annotation_seconds(obj["metadata"], READY_SECONDS) or 0.0) == 0.0
        ip = self._next_ip()
        status.update(
            {
                "phase": "Running",
                "hostIP": "192.168.0.1",
                "hostIPs": [{"ip": "192.168.0.1"}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": status.get("startTime") or now,
            }
        )
        if spec.get("initContainers"):
            status["initContainerStatuses"] = self._init_statuses(spec, now)
        containers = self._container_statuses(
            spec, now, status.get("containerStatuses"), running=True
        )
        for c in containers:
            c["ready"] = ready
        status["containerStatuses"] = containers
        _set_conditions(
            status,
            [
                _cond("PodReadyToStartContainers", True, now),
                _cond("Initialized", True, now),
                _cond("Ready", ready, now, "" if ready else "ContainersNotReady"),
                _cond("ContainersReady", ready, now, "" if ready else "ContainersNotReady"),
                _cond("PodScheduled", True, now),
            ],
        )
        self._write_status(stored, obj)
        self._plan_running(key, obj)

    def _ready(self, key: str) -> None:
        stored = self._get(key)
        if stored is None or (stored.obj.get("status") or {}).get("phase") != "Running":
            return
        obj = _status_copy(stored)
        now = self.store.now()
        status = obj["status"]
        for c in status.get("containerStatuses") or ():
            c["ready"] = True
        _set_conditions(status, [_cond("Ready", True, now), _cond("ContainersReady", True, now)])
        self._write_status(stored, obj)

    def _finish(self, key: str, code: int | None = None) -> None:
        """The containers exit (with `code`, else the annotated one); restart them in place or
        end the pod, as its rules say."""
        stored = self._get(key)
        if stored is None or (stored.obj.get("status") or {}).get("phase") != "Running":
            return
        obj = _status_copy(stored)
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj["status"]
        if code is None:
            code = _exit_code(meta)
        now = self.store.now()
        pod_policy = spec.get("restartPolicy", "Always")
        restart_all = False
        restarting: set[str] = set()
        for container in spec.get("containers") or ():
            action = _rule_action(container, code)
            if action == "RestartAllContainers":
                restart_all = True
            elif action == "Restart" or (
                action is None and _restarts(container.get("restartPolicy") or pod_policy, code)
            ):
                restarting.add(str(container.get("name")))
        for c in spec.get("initContainers") or ():
            if _rule_action(c, code) == "RestartAllContainers":
                restart_all = True
        terminated = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": now,
                "finishedAt": now,
            }
        }
        names = {str(c.get("name")) for c in spec.get("containers") or ()}
        if restart_all:
            restarting = names
        for cs in status.get("containerStatuses") or ():
            cs["state"] = terminated
            cs["ready"] = False
            cs["started"] = False
        if restarting:
            # Containers wait out the kubelet back-off, then run again on the same node.
            count = max(
                (cs.get("restartCount", 0) for cs in status.get("containerStatuses") or ()),
                default=0,
            )
            conditions = [
                _cond("Ready", False, now, "ContainersNotReady"),
                _cond("ContainersReady", False, now, "ContainersNotReady"),
            ]
            if restart_all:
                conditions.append(_cond("AllContainersRestarting", True, now, "ContainerExited"))
            _set_conditions(status, conditions)
            self._write_status(stored, obj)
            backoff = 0.0 if restart_all else min(_BACKOFF_BASE * 2**count, _BACKOFF_MAX)
            delay = backoff + (self.start_seconds if restart_all else 0.0)
            self._later(key, "restart", delay, lambda k: self._restart(k, restarting, restart_all))
            return
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        reason = "PodCompleted"
        _set_conditions(
            status,
            [_cond("Ready", False, now, reason), _cond("ContainersReady", False, now, reason)],
        )
        self._write_status(stored, obj)

    def _restart(self, key: str, names: set[str], restart_all: bool) -> None:
        stored = self._get(key)
        if stored is None or stored.obj["metadata"].get("deletionTimestamp"):
            return
        obj = _status_copy(stored)
        status = obj.get("status") or {}
        if status.get("phase") != "Running":
            return
        now = self.store.now()
        ready = (_annotation_seconds(obj["metadata"], READY_SECONDS) or 0.0) == 0.0
        for cs in status.get("containerStatuses") or ():
            if cs.get("name") in names:
                cs["lastState"] = cs.get("state")
                cs["state"] = {"running": {"startedAt": now}}
                cs["restartCount"] = cs.get("restartCount", 0) + 1
                cs["started"] = True
            cs["ready"] = ready
        if restart_all:
            for ics in status.get("initContainerStatuses") or ():
                ics["restartCount"] = ics.get("restartCount", 0) + 1
        conditions = [_cond("Ready", ready, now), _cond("ContainersReady", ready, now)]
        if restart_all:
            conditions.append(_cond("AllContainersRestarting", False, now))
        _set_conditions(status, conditions)
        self._write_status(stored, obj)
        self._plan_running(key, obj)

    def _terminate(self, key: str) -> None:
        """The grace period is over: containers are killed, the pod ends and is removed."""
        stored = self._get(key)
        if stored is None:
            return
        obj = _status_copy(stored)
        status = obj.setdefault("status", {})
        if status.get("phase") not in ("Succeeded", "Failed"):
            now = self.store.now()
            for cs in status.get("containerStatuses") or ():
                cs["state"] = {
                    "terminated": {"exitCode": _KILLED_EXIT, "reason": "Error", "finishedAt": now}
                }
                cs["ready"] = False
                cs["started"] = False
            status["phase"] = "Failed"
            reason = "PodCompleted"
            _set_conditions(
                status,
                [_cond("Ready", False, now, reason), _cond("ContainersReady", False, now, reason)],
            )
            self._write_status(stored, obj)
        self._finalize(key)

    def _finalize(self, key: str) -> None:
        stored = self._get(key)
        if stored is None:
            return
        meta = stored.obj["metadata"]
        self.registry.delete(
            PODS,
            meta.get("namespace", ""),
            meta["name"],
            DeleteOptions(grace_seconds=0, uid=meta["uid"]),
        )

    def _fail(
        self, key: str, reason: str, message: str, condition: dict[str, Any] | None
    ) -> Stored | None:
        stored = self._get(key)
        if stored is None:
            return None
        obj = _status_copy(stored)
        status = obj.setdefault("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            return stored
        now = self.store.now()
        status.update({"phase": "Failed", "reason": reason, "message": message})
        for cs in status.get("containerStatuses") or ():
            if "running" in (cs.get("state") or {}):
                cs["state"] = {
                    "terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now}
                }
            cs["ready"] = False
        updates = [
            _cond("Ready", False, now, "PodFailed"),
            _cond("ContainersReady", False, now, "PodFailed"),
        ]
        if condition is not None:
            updates.append(condition)
        _set_conditions(status, updates)
        self._write_status(stored, obj)
        return self._get(key)

    def _lost(self, key: str) -> None:
        stored = self._get(key)
        if stored is None:
            return
        node = (stored.obj.get("spec") or {}).get("nodeName")
        self._fail(
            key,
            "NodeLost",
            f"Node {node} which was running pod {stored.obj['metadata']['name']} is unresponsive",
            None,
        )

    def _node_gone(self, key: str) -> None:
        """PodGC: a pod bound to a node that no longer exists fails and is force-deleted."""
        now = self.store.now()
        condition = _cond("DisruptionTarget", True, now, "DeletionByPodGC")
        condition["message"] = "PodGC: node no longer exists"
        if self._fail(key, "NodeLost", "node no longer exists", condition) is not None:
            self._finalize(key)

    def exit_containers(self, namespace: str, name: str, code: int) -> None:
        """A process in the pod exits now with `code` (the in-place restart agent does, see
        `daemon.sim.inplace_agent`): the same path as a timed exit, restart rules included."""
        key = object_key(namespace, name)
        if self._has(key, "restart"):
            return  # already restarting
        self._cancel(key, "finish")
        self._finish(key, code)

    # -- controls for tests and demos ---------------------------------------------------------

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Flip a node's Ready condition, as when its kubelet stops or resumes posting status
        (the node lifecycle controller's unreachable taint comes and goes with it)."""
        stored = self.store.get(NODES, "", name)
        if stored is None:
            raise KeyError(f"no node {name!r}")
        now = self.store.now()
        obj = stored.copy()
        spec = obj.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or () if t.get("key") != UNREACHABLE]
        if not ready:
            taints.append({"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now})
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
        self.registry.update(NODES, "", name, obj)
        obj = self.store.get(NODES, "", name).copy()  # type: ignore[union-attr]
        condition = {
            "type": "Ready",
            "status": "True" if ready else "Unknown",
            "reason": "KubeletReady" if ready else "NodeStatusUnknown",
            "message": "kubelet is posting ready status"
            if ready
            else "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        status = obj.setdefault("status", {})
        others = [c for c in status.get("conditions") or () if c.get("type") != "Ready"]
        status["conditions"] = [*others, condition]
        self.registry.update(NODES, "", name, obj, subresource="status")

    def remove_node(self, name: str) -> None:
        """Delete a node; its pods fail and are removed as the pod GC does."""
        self.registry.delete(NODES, "", name, DeleteOptions())
