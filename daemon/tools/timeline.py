"""`kbatchd replay LOG --timeline`: what happened to each workload over time, and which
workload's pods held the GPUs of each host, as data (``--json``), text, or an HTML page
(`daemon.tools.timeline_page`).

One pass folds the log. Along it:

- every decision becomes a *mark* on the row of its workload, in the category its reason's
  head gives (`events.reasons`: admitted, not-admitted, preempted, restarted, finished, ...);
  a preemption's Delete intents also mark each victim's row, naming the preemptor;
- every change of a host's GPU use (a pod bound, finished or gone; a node joining, leaving or
  changing) becomes a *change* of that host's cell: its capacity and the GPUs each workload
  holds there. The page replays the changes up to any seq to draw the racks then.

A workload is the top of a pod's chain of controllers as far as the state knows it (Pod →
Job → JobSet), else the PodGroup it names, else the pod itself; a decision's row is the
workload of its key's object.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

from events.fold import fold
from events.intents import Delete
from events.objects import Node, Pod
from events.reasons import CATEGORIES, categorize, heads
from events.replay import Progress, iso_time, natural_key, paused_gc, rebuild
from events.schema import Decided, Observed, Started
from events.state import State
from events.store import EventLog
from events.topology import DEFAULT_LEVELS, charge_of

GPU: Final = "nvidia.com/gpu"
# Bounds on what a page carries, so that a huge log still gives a page a browser opens: past
# them the history is cut (and says so), the picture at --at is still exact.
MAX_CHANGES: Final = 200_000
MAX_MARKS: Final = 50_000
_REASON_WIDTH: Final = 400
_PROGRESS_EVERY: Final = 1 << 16

# (capacity, participates, ((workload, amount), ...)); a host's cell of the rack picture.
Cell = tuple[int, bool, tuple[tuple[int, int], ...]]
_EMPTY: Final[Cell] = (0, False, ())


def workload_of(state: State, ref: str) -> str:
    """The workload an object belongs to: the top of its controller chain in `state` (a
    controller the state does not hold, a ReplicaSet say, ends the chain), a pod without
    one the PodGroup it names, else the object itself."""
    for _ in range(8):  # controller chains are short; a cycle in bad data must not hang
        obj = state.get(ref)
        if obj is None:
            return ref
        cluster = ref.split("/", 2)[1]
        owner = obj.controller
        if owner is not None:
            ref = f"{owner.kind}/{cluster}/{obj.namespace}/{owner.name}"
        elif isinstance(obj, Pod) and obj.pod_group:
            ref = f"PodGroup/{cluster}/{obj.namespace}/{obj.pod_group}"
        else:
            return ref
    return ref


class _Recorder:
    """What the pass collects; `data()` turns it into the page's plain data."""

    def __init__(self, state: State, resource: str) -> None:
        self.state = state
        self.resource = resource
        self.workloads: dict[str, int] = {}
        self.hosts: dict[str, int] = {}
        self.host_info: list[dict[str, Any]] = []
        self.cells: dict[int, Cell] = {}
        self.changes: list[list[Any]] = []
        self.changes_cut = False
        self.marks: list[dict[str, Any]] = []
        self.usage: dict[int, list[list[int]]] = {}
        self.totals: dict[int, int] = {}
        self.picture: list[list[Any]] | None = None
        self.daemon_starts: list[dict[str, Any]] = []
        # How much of the resource is held, and the first seq it was held most at (among
        # the changes kept): where the page opens.
        self.in_use = 0
        self.busiest: tuple[int, int] = (0, 0)

    def workload(self, ref: str) -> int:
        index = self.workloads.get(ref)
        if index is None:
            index = self.workloads[ref] = len(self.workloads)
        return index

    def host(self, node_key: str) -> int:
        index = self.hosts.get(node_key)
        if index is None:
            index = self.hosts[node_key] = len(self.host_info)
            cluster, _, name = node_key.split("/", 2)
            node = self.state.nodes.get(node_key)
            labels = node.labels if node is not None else {}
            levels = self.state.topology.levels
            path = [labels.get(level, "") for level in levels[:-1]] + [name]
            self.host_info.append({"cluster": cluster, "node": name, "path": path})
        return index

    def cell(self, node_key: str) -> Cell:
        state = self.state
        topology = state.topology
        participating = node_key in topology.paths
        if participating:
            capacity = topology.node_capacity[node_key].get(self.resource, 0)
        else:
            node = state.nodes.get(node_key)
            capacity = node.allocatable.get(self.resource, 0) if node is not None else 0
        held: dict[int, int] = {}
        pods = state.pods
        for pod_key in topology.node_pods.get(node_key, ()):
            pod = pods.get(pod_key)
            amount = pod.requests.get(self.resource, 0) if pod is not None else 0
            if amount:
                workload = self.workload(workload_of(state, f"Pod/{pod_key}"))
                held[workload] = held.get(workload, 0) + amount
        return capacity, participating, tuple(sorted(held.items()))

    def start(self) -> None:
        """The cells before the first recorded seq: the page's starting picture."""
        for node_key in sorted({*self.state.nodes, *self.state.topology.node_pods}):
            cell = self.cell(node_key)
            if cell != _EMPTY:
                host = self.host(node_key)
                self.cells[host] = cell
                self._count(cell, 1, self.state.seq, self.state.now)
                self.in_use += sum(n for _, n in cell[2])
        self.busiest = (self.in_use, self.state.seq)

    def daemon_started(self, seq: int, event: Started) -> None:
        """A daemon opened the log here: the decisions after it are its own."""
        self.daemon_starts.append(
            {"seq": seq, "at": event.at, "version": event.version, "rules": event.rules}
        )

    def touch(self, seq: int, at: int, node_keys: Iterable[str]) -> None:
        for node_key in node_keys:
            host = self.host(node_key)
            cell = self.cell(node_key)
            old = self.cells.get(host, _EMPTY)
            if cell == old:
                continue
            self.cells[host] = cell
            self._count(old, -1, seq, at)
            self._count(cell, 1, seq, at)
            self.in_use += sum(n for _, n in cell[2]) - sum(n for _, n in old[2])
            if len(self.changes) < MAX_CHANGES:
                self.changes.append([seq, at, host, cell[0], int(cell[1]), _pairs(cell)])
                if self.in_use > self.busiest[0]:
                    self.busiest = (self.in_use, seq)
            else:
                self.changes_cut = True

    def _count(self, cell: Cell, sign: int, seq: int, at: int) -> None:
        for workload, amount in cell[2]:
            total = self.totals.get(workload, 0) + sign * amount
            self.totals[workload] = total
            series = self.usage.setdefault(workload, [])
            if series and series[-1][0] == seq:
                series[-1][2] = total
            elif not self.changes_cut:
                series.append([seq, at, total])

    def decided(self, seq: int, event: Decided) -> None:
        state = self.state
        row = self.workload(workload_of(state, event.key))
        category = categorize(event.reason)
        victims: set[int] = set()
        if category == "preempted":
            for intent in event.intents:
                if isinstance(intent, Delete) and intent.kind == "Pod":
                    pod_ref = f"Pod/{intent.cluster}/{intent.namespace}/{intent.name}"
                    victim = self.workload(workload_of(state, pod_ref))
                    if victim != row:
                        victims.add(victim)
        mark = {
            "seq": seq,
            "at": event.at,
            "w": row,
            "cat": "preempting" if victims else category,
            "heads": heads(event.reason),
            "reason": _cut(event.reason),
            "key": event.key,
            "reconciler": event.reconciler,
        }
        self.marks.append(mark)
        for victim in sorted(victims):
            self.marks.append(mark | {"w": victim, "cat": "preempted", "by": row})

    def snapshot(self) -> list[list[Any]]:
        return [[host, *cell[:2], _pairs(cell)] for host, cell in sorted(self.cells.items())]


def _pairs(cell: Cell) -> list[list[int]]:
    return [[workload, amount] for workload, amount in cell[2]]


def _cut(text: str) -> str:
    return text if len(text) <= _REASON_WIDTH else text[: _REASON_WIDTH - 1] + "…"


async def timeline(
    log: EventLog,
    *,
    from_seq: int = 1,
    until: int | None = None,
    at: int | None = None,
    levels: tuple[str, ...] = DEFAULT_LEVELS,
    resource: str = GPU,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The timeline of seqs `from_seq`..`until` (default: the whole log) and the rack
    picture at `at` (default: `until`), as plain data. The page opens at `at`, or without
    one at the busiest moment: the first seq at which the most of `resource` was held."""
    last = log.last_seq if until is None else min(until, log.last_seq)
    before = await rebuild(log, until=min(from_seq - 1, last), levels=levels)
    state = before.state
    await log.check_chain(after=state.seq, until=last)
    recorder = _Recorder(state, resource)
    recorder.start()
    initial = recorder.snapshot()
    first, start_ms = state.seq + 1, state.now
    chosen = last if at is None else max(min(at, last), state.seq)
    if chosen == state.seq:
        recorder.picture = initial
    with paused_gc():
        await _fold_recording(log, state, recorder, last, chosen, progress)
    if progress is not None:
        progress(last, last)
    data = _data(log.path, recorder, initial, first, last, chosen, start_ms)
    data["open"] = recorder.busiest[1] if at is None else chosen
    return data


async def _fold_recording(
    log: EventLog,
    state: State,
    recorder: _Recorder,
    last: int,
    chosen: int,
    progress: Progress | None,
) -> None:
    """Fold the rest of the log, telling the recorder what each event changed."""
    folded = 0
    async for batch in log.read_batches(from_seq=state.seq + 1, until=last):
        for seq, event in batch:
            if type(event) is Observed:
                obj = event.obj
                key = f"{event.cluster}/{obj.namespace}/{obj.name}"
                if type(obj) is Pod:
                    old_pod = state.pods.get(key)
                    old = charge_of(event.cluster, old_pod)
                    fold(state, seq, event)
                    new = charge_of(event.cluster, state.pods.get(key))
                    if new != old or (
                        new is not None and old_pod is not None and old_pod.owners != obj.owners
                    ):
                        recorder.touch(seq, event.at, {c[0] for c in (old, new) if c is not None})
                elif type(obj) is Node:
                    fold(state, seq, event)
                    recorder.touch(seq, event.at, (key,))
                else:
                    fold(state, seq, event)
            elif isinstance(event, Decided):
                recorder.decided(seq, event)  # its row as the state stood when it was made
                fold(state, seq, event)
            elif isinstance(event, Started):
                recorder.daemon_started(seq, event)
                fold(state, seq, event)
            else:
                fold(state, seq, event)
            if seq == chosen:
                recorder.picture = recorder.snapshot()
        folded += len(batch)
        if progress is not None and folded % _PROGRESS_EVERY < len(batch):
            progress(state.seq, last)


def _data(
    path: str,
    recorder: _Recorder,
    initial: list[list[Any]],
    first: int,
    last: int,
    chosen: int,
    start_ms: int,
) -> dict[str, Any]:
    state = recorder.state
    marks = recorder.marks
    marks_cut = len(marks) > MAX_MARKS
    if marks_cut:
        marks = [m for m in marks if m["cat"] != "other"][:MAX_MARKS]
    times = [m["at"] for m in marks] + [c[1] for c in recorder.changes]
    times += [d["at"] for d in recorder.daemon_starts]
    start = min([t for t in (start_ms, *times) if t], default=state.now)
    peaks = {w: max((s[2] for s in series), default=0) for w, series in recorder.usage.items()}
    counts = Counter(m["w"] for m in marks)
    workloads = []
    for ref, index in recorder.workloads.items():
        kind, cluster, namespace, name = ref.split("/", 3)
        workloads.append(
            {
                "ref": ref,
                "label": f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}",
                "cluster": cluster,
                "peak": peaks.get(index, 0),
                "marks": counts[index],
            }
        )
    return {
        "log": path,
        "first_seq": first,
        "last_seq": last,
        "at": chosen,
        "start": start,
        "end": max(state.now, start),
        "resource": recorder.resource,
        "levels": list(state.topology.levels),
        "categories": [*CATEGORIES, "preempting"],
        "workloads": workloads,
        "hosts": recorder.host_info,
        "initial": initial,
        "changes": recorder.changes,
        "changes_cut": recorder.changes_cut,
        "picture": recorder.snapshot() if recorder.picture is None else recorder.picture,
        "marks": marks,
        "marks_cut": marks_cut,
        "daemon_starts": recorder.daemon_starts,
        "usage": {str(w): series for w, series in recorder.usage.items()},
    }


# ---------------------------------------------------------------------------------------------
# Text

_SHOWN_MARKS: Final = 30
_SHOWN_RACKS: Final = 40


def render(data: dict[str, Any]) -> str:
    unit = "GPU" if data["resource"] == GPU else data["resource"]
    span = (data["end"] - data["start"]) / 1000
    lines = [
        f"log {data['log']}: seq {data['first_seq']:,}..{data['last_seq']:,}, "
        f"{iso_time(data['start'])} + {span:,.1f} s; {len(data['workloads'])} workload(s), "
        f"{len(data['hosts'])} host(s)",
    ]
    for start in data["daemon_starts"][:_SHOWN_MARKS]:
        lines.append(
            f"daemon started  {iso_time(start['at'])[11:23]}  {start['seq']:>8,}  "
            f"kbatchd {start['version']}, decision rules {start['rules']}"
        )
    if len(data["daemon_starts"]) > _SHOWN_MARKS:
        lines.append(
            f"  (+{len(data['daemon_starts']) - _SHOWN_MARKS} more starts: --json lists them)"
        )
    for index, workload in enumerate(data["workloads"]):
        own = [m for m in data["marks"] if m["w"] == index and m["cat"] != "other"]
        if not own and not workload["peak"]:
            continue
        lines.append(
            f"{workload['label']} ({workload['cluster']}): peak {workload['peak']} {unit}, "
            f"{workload['marks']} decision(s)"
        )
        runs = _runs(own)
        for mark, repeats in runs[:_SHOWN_MARKS]:
            by = f" by {data['workloads'][mark['by']]['label']}" if "by" in mark else ""
            again = f" (×{repeats})" if repeats > 1 else ""
            lines.append(
                f"  {iso_time(mark['at'])[11:23]}  {mark['seq']:>8,}  "
                f"{mark['cat'] + by:<14} {_first_part(mark['reason'])}{again}"
            )
        if len(runs) > _SHOWN_MARKS:
            lines.append(f"  (+{len(runs) - _SHOWN_MARKS} more: --json lists them)")
    lines.extend(_render_racks(data, unit))
    return "\n".join(lines)


def _runs(marks: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Consecutive marks saying the same thing (a Job backing off over several decisions)
    as one, with how many there were."""
    runs: list[tuple[dict[str, Any], int]] = []
    for mark in marks:
        if runs:
            previous, count = runs[-1]
            same = (previous["cat"], previous.get("by"), _first_part(previous["reason"]))
            if same == (mark["cat"], mark.get("by"), _first_part(mark["reason"])):
                runs[-1] = (previous, count + 1)
                continue
        runs.append((mark, 1))
    return runs


def _first_part(reason: str) -> str:
    head = reason.split("; ", 1)[0]
    return head if len(head) <= 100 else head[:99] + "…"


def _render_racks(data: dict[str, Any], unit: str) -> list[str]:
    """Per rack: GPUs used of capacity, and by which workloads."""
    racks: dict[tuple[str, ...], dict[str, Any]] = {}
    hosts = data["hosts"]
    for host, capacity, _, pairs in data["picture"]:
        info = hosts[host]
        rack = racks.setdefault(
            (info["cluster"], *info["path"][:-1]), {"capacity": 0, "used": 0, "by": {}}
        )
        rack["capacity"] += capacity
        for workload, amount in pairs:
            rack["used"] += amount
            rack["by"][workload] = rack["by"].get(workload, 0) + amount
    used = sum(r["used"] for r in racks.values())
    capacity = sum(r["capacity"] for r in racks.values())
    lines = [f"racks at seq {data['at']:,}: {used} of {capacity} {unit} in use"]
    order = sorted(racks, key=lambda k: [natural_key(part) for part in k])
    for rack_key in order[:_SHOWN_RACKS]:
        rack = racks[rack_key]
        by = ", ".join(
            f"{data['workloads'][w]['label']} {n}"
            for w, n in sorted(rack["by"].items(), key=lambda item: -item[1])
        )
        name = "/".join(part for part in rack_key if part) or "(no topology labels)"
        usage = f"{rack['used']:>5}/{rack['capacity']}"
        lines.append(f"  {name:<28} {usage:<12} {by}".rstrip())
    if len(order) > _SHOWN_RACKS:
        lines.append(f"  (+{len(order) - _SHOWN_RACKS} more racks: --json or --html)")
    return lines
