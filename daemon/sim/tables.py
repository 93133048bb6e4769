"""Server-side printing: the `meta.k8s.io` `Table` a GET answers when the client asks for one
(`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, as kubectl get does).

The columns are the real server's (`table_columns.json`: the names, types, formats and
priorities kube-apiserver 1.36 answers, with descriptions of our own); the cells are computed
here as its printers compute them, wide columns included (the server always prints them;
kubectl hides priority 1 columns unless `-o wide`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from daemon.sim.errors import bad_request
from daemon.sim.resources import Resource
from daemon.sim.store import Obj, parse_rfc3339
from daemon.sim.validation import condition_true

TABLE_VERSIONS: Final = ("v1", "v1beta1")
_COLUMNS: Final[dict[str, list[dict[str, Any]]]] = json.loads(
    (Path(__file__).parent / "table_columns.json").read_text()
)
_INCLUDE: Final = ("Metadata", "Object", "None", "")


def table_version(accept: str) -> str | None:
    """The `meta.k8s.io` version of the Table the Accept header asks for, or None when its
    first acceptable type is a plain object (the server takes the first it can serve)."""
    for media in accept.split(","):
        kind, *params = (part.strip() for part in media.split(";"))
        args = dict(p.partition("=")[::2] for p in params)
        if args.get("as") == "Table":
            if args.get("g") == "meta.k8s.io" and args.get("v") in TABLE_VERSIONS:
                return args["v"]
        elif kind in ("application/json", "*/*", "application/*", "application/yaml"):
            return None
    return None


def human_duration(seconds: float) -> str:
    """`duration.HumanDuration`: how every printer writes an age."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _since(timestamp: Any, now: float) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    return human_duration(now - parse_rfc3339(timestamp))


def _terminated_reason(state: dict[str, Any], prefix: str = "") -> str:
    if state.get("reason"):
        return prefix + str(state["reason"])
    if state.get("signal"):
        return f"{prefix}Signal:{state['signal']}"
    return f"{prefix}ExitCode:{state.get('exitCode', 0)}"


def _pod_cells(pod: Obj, now: float) -> list[Any]:
    """`printPod`: ready count, the aggregate status, restarts and where it runs."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    conditions = status.get("conditions") or ()
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or ()}

    def sidecar(name: Any) -> bool:
        return (init_specs.get(name) or {}).get("restartPolicy") == "Always"

    total = len(spec.get("containers") or ()) + sum(1 for n in init_specs if sidecar(n))
    reason = status.get("reason") or status.get("phase") or ""
    if any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions
    ):
        reason = "SchedulingGated"
    ready = restarts = sidecar_restarts = 0
    last_restart = last_sidecar_restart = ""
    initializing = False
    init_statuses = status.get("initContainerStatuses") or ()
    for index, container in enumerate(init_statuses):
        state = container.get("state") or {}
        finished = ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        restarts += container.get("restartCount", 0)
        last_restart = max(last_restart, finished or "")
        if sidecar(container.get("name")):
            sidecar_restarts += container.get("restartCount", 0)
            last_sidecar_restart = max(last_sidecar_restart, finished or "")
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and terminated.get("exitCode", 0) == 0:
            continue
        if sidecar(container.get("name")) and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        if terminated is not None:
            reason = _terminated_reason(terminated, "Init:")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break
    if not initializing or condition_true(status, "Initialized"):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        running, error = False, ""
        for container in reversed(status.get("containerStatuses") or ()):
            state = container.get("state") or {}
            finished = ((container.get("lastState") or {}).get("terminated") or {}).get(
                "finishedAt"
            )
            restarts += container.get("restartCount", 0)
            last_restart = max(last_restart, finished or "")
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None:
                reason = _terminated_reason(terminated)
                if terminated.get("exitCode", 0) != 0:
                    error = reason
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed":
            if running and condition_true(status, "Ready"):
                reason = "Running"
            elif error:
                reason = error
            elif running:
                reason = "NotReady"
    if pod["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart:
        restarts_text = f"{restarts} ({_since(last_restart, now)} ago)"
    gates = spec.get("readinessGates") or ()
    gates_text = "<none>"
    if gates:
        by_type = {c.get("type"): c for c in reversed(conditions)}
        true = sum(
            1 for g in gates if (by_type.get(g.get("conditionType")) or {}).get("status") == "True"
        )
        gates_text = f"{true}/{len(gates)}"
    ips = status.get("podIPs") or ()
    return [
        pod["metadata"].get("name"),
        f"{ready}/{total}",
        reason,
        restarts_text,
        _since(pod["metadata"].get("creationTimestamp"), now),
        (ips[0].get("ip") if ips else "") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]


def _pod_row_conditions(pod: Obj) -> list[dict[str, str]] | None:
    phase = (pod.get("status") or {}).get("phase")
    message = {"Succeeded": "The pod has completed successfully.", "Failed": "The pod failed."}
    if phase not in message:
        return None
    return [{"type": "Completed", "status": "True", "reason": phase, "message": message[phase]}]


def label_selector_text(selector: Any) -> str:
    """`metav1.FormatLabelSelector`: a selector as `kubectl get -l` would take it."""
    if not isinstance(selector, dict):
        return "<none>"
    parts = [(key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()]
    operators = {"In": "in", "NotIn": "notin"}
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key", ""), expression.get("operator")
        values = ",".join(sorted(expression.get("values") or ()))
        if operator in operators:
            parts.append((key, f"{key} {operators[operator]} ({values})"))
        else:
            parts.append((key, key if operator == "Exists" else f"!{key}"))
    return ",".join(text for _, text in sorted(parts)) or "<none>"


def _job_cells(job: Obj, now: float) -> list[Any]:
    """`printJob` (1.32+ prints a Status column)."""
    spec, status, meta = job.get("spec") or {}, job.get("status") or {}, job["metadata"]
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = status.get("startTime"), status.get("completionTime")
    duration = ""
    if start:
        elapsed = (parse_rfc3339(end) if end else now) - parse_rfc3339(start)
        duration = human_duration(elapsed)
    if condition_true(status, "Complete"):
        state = "Complete"
    elif condition_true(status, "Failed"):
        state = "Failed"
    elif meta.get("deletionTimestamp"):
        state = "Terminating"
    else:
        later = ("Suspended", "FailureTarget", "SuccessCriteriaMet")
        state = next((c for c in later if condition_true(status, c)), "Running")
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or ()
    return [
        meta.get("name"),
        state,
        completions,
        duration,
        _since(meta.get("creationTimestamp"), now),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        label_selector_text(spec.get("selector")),
    ]


def _node_cells(node: Obj, now: float) -> list[Any]:
    """`printNode`: readiness (and cordoning), roles from labels, the kubelet's report."""
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = [c for c in status.get("conditions") or () if c.get("type") == "Ready"]
    states = [("Ready" if ready[-1].get("status") == "True" else "NotReady")] if ready else []
    states = states or ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = sorted(
        {
            key.removeprefix("node-role.kubernetes.io/")
            for key in meta.get("labels") or {}
            if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/"
        }
        | {v for k, v in (meta.get("labels") or {}).items() if k == "kubernetes.io/role" and v}
    )
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or ()

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), "<none>")

    kernel = info.get("kernelVersion") or "<unknown>"
    if info.get("architecture"):
        kernel += f" ({info['architecture']})"
    return [
        meta.get("name"),
        ",".join(states),
        ",".join(roles) or "<none>",
        _since(meta.get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        kernel,
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _text(value: Any) -> str | None:
    """A CRD printer column of type string: the JSONPath result as `kubectl` prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _jobset_cells(jobset: Obj, now: float) -> list[Any]:
    """The JobSet CRD's additionalPrinterColumns."""
    spec, status = jobset.get("spec") or {}, jobset.get("status") or {}
    completed = [
        c.get("status") for c in status.get("conditions") or () if c.get("type") == "Completed"
    ]
    return [
        jobset["metadata"].get("name"),
        _text(status.get("terminalState")),
        _text(status.get("restarts")),
        _text(completed[0] if completed else None),
        _text(spec.get("suspend")),
        _since(jobset["metadata"].get("creationTimestamp"), now),
    ]


def _pod_group_cells(group: Obj, now: float) -> list[Any]:
    """`printPodGroup`: the policy, the Workload it came from and whether it is placed."""
    spec, status = group.get("spec") or {}, group.get("status") or {}
    policy = "Gang" if (spec.get("schedulingPolicy") or {}).get("gang") is not None else "Basic"
    by_type = {c.get("type"): c for c in status.get("conditions") or ()}
    state = "Pending"
    if "PodGroupScheduled" in by_type:
        scheduled = by_type["PodGroupScheduled"].get("status") == "True"
        state = "Scheduled" if scheduled else "Unschedulable"
    if "DisruptionTarget" in by_type:
        state = by_type["DisruptionTarget"].get("reason", "")
    ref = spec.get("podGroupTemplateRef")
    workload = ((ref.get("workload") or {}).get("workloadName", "")) if ref else "<none>"
    return [
        group["metadata"].get("name"),
        policy,
        workload,
        state,
        _since(group["metadata"].get("creationTimestamp"), now),
    ]


def _named(*fields: Callable[[Obj], Any]) -> Callable[[Obj, float], list[Any]]:
    """Cells of a printer that prints the name, `fields`, then the age."""

    def cells(obj: Obj, now: float) -> list[Any]:
        meta = obj["metadata"]
        values = [field(obj) for field in fields]
        return [meta.get("name"), *values, _since(meta.get("creationTimestamp"), now)]

    return cells


def _priority_class_cells(obj: Obj, now: float) -> list[Any]:
    meta = obj["metadata"]
    return [
        meta.get("name"),
        obj.get("value", 0),
        bool(obj.get("globalDefault")),
        _since(meta.get("creationTimestamp"), now),
        obj.get("preemptionPolicy") or "",
    ]


_CELLS: Final[dict[str, Callable[[Obj, float], list[Any]]]] = {
    "Pod": _pod_cells,
    "Job": _job_cells,
    "Node": _node_cells,
    "JobSet": _jobset_cells,
    "PodGroup": _pod_group_cells,
    "Namespace": _named(lambda o: (o.get("status") or {}).get("phase", "")),
    "Lease": _named(lambda o: (o.get("spec") or {}).get("holderIdentity") or "<none>"),
    "PriorityClass": _priority_class_cells,
}


def include_object(query: Any) -> str:
    """`includeObject`: what each row carries (`Metadata` unless asked otherwise)."""
    value = query.get("includeObject", "")
    if value not in _INCLUDE:
        raise bad_request(
            "Unable to convert to Table as requested: includeObject: Invalid value: "
            f"\"{value}\": must be 'Metadata', 'Object', 'None', or empty"
        )
    return str(value or "Metadata")


def table(
    resource: Resource,
    objects: list[Obj],
    list_meta: dict[str, Any],
    *,
    now: float,
    include: str,
    version: str,
) -> dict[str, Any]:
    """A Table of `objects` (one, for a single GET); `list_meta` is the list's metadata."""
    kind = resource.kind if resource.kind in _CELLS else "_default"
    cells = _CELLS.get(kind, _named())
    api_version = f"meta.k8s.io/{version}"
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(obj, now)}
        if kind == "Pod" and (conditions := _pod_row_conditions(obj)):
            row["conditions"] = conditions
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            partial = {"kind": "PartialObjectMetadata", "apiVersion": api_version}
            row["object"] = {**partial, "metadata": obj["metadata"]}
        else:
            row["object"] = None
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": list_meta,
        "columnDefinitions": _COLUMNS[kind],
        "rows": rows,
    }
