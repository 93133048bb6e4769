"""What must hold after every chaos run, whatever the fault. Each check returns its violations
as sentences (none: it holds).

The oracle is the simulated cluster's own record of every change it made (`Journal`), not
the daemon's log: the log is what is checked against it."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from daemon.sim.cluster import SimCluster
from daemon.sim.store import WatchEvent
from events.intents import Delete
from events.schema import Decided, Event, Observed, Outcome, Resynced, Started
from tests.chaos.load import INDEX, JOB_NAME

Logged = Sequence[tuple[int, Event]]


class Change(msgspec.Struct, frozen=True):
    """One change the cluster made: an object's version."""

    kind: str
    uid: str
    rv: int
    type: str  # ADDED, MODIFIED or DELETED
    obj: dict[str, Any]


class Journal:
    """Every object the cluster holds now, as added, then every change it makes, in order (a
    listener on its store)."""

    def __init__(self, sim: SimCluster) -> None:
        self.events: list[Change] = [
            Change(
                table.resource.kind, stored.obj["metadata"]["uid"], stored.rv, "ADDED", stored.obj
            )
            for table in sim.store.tables.values()
            for stored in sim.store.iter_objects(table.resource)
        ]
        sim.store.listeners.append(self._record)

    def _record(self, event: WatchEvent) -> None:
        uid = event.obj["metadata"].get("uid", "")
        self.events.append(Change(event.resource.kind, uid, event.rv, event.type, event.obj))


def _pods(journal: Iterable[Change]) -> dict[str, list[Change]]:
    """Each pod's changes, by uid."""
    pods: dict[str, list[Change]] = defaultdict(list)
    for change in journal:
        if change.kind == "Pod":
            pods[change.uid].append(change)
    return pods


def _phase(event: Change) -> str:
    phase: str = (event.obj.get("status") or {}).get("phase", "")
    return phase


def pods_per_attempt(journal: Iterable[Change], failed: dict[str, list[int]]) -> list[str]:
    """No pod is created twice for one Job index (or, in a plain Job, one completion) and
    attempt: the pods a Job ever had are its successes plus the failures the run injected
    (`failed`: job -> the indexes, or creation places, made to fail), and none was deleted
    before it finished."""
    # job -> index ("" in a plain Job) -> final events of its pods
    finals: dict[str, dict[str, list[Change]]] = defaultdict(lambda: defaultdict(list))
    for events in _pods(journal).values():
        metadata = events[0].obj["metadata"]
        job = (metadata.get("labels") or {}).get(JOB_NAME)
        if job is not None:
            index = (metadata.get("annotations") or {}).get(INDEX, "")
            finals[job][index].append(events[-1])
    violations: list[str] = []
    for job, by_index in sorted(finals.items()):
        injected = Counter(str(i) for i in failed.get(job, ()))
        indexed = "" not in by_index
        for index, ends in sorted(by_index.items()):
            where = f"Job {job}" + (f" index {index}" if indexed else "")
            phases = Counter(_phase(e) for e in ends)
            unfinished = len(ends) - phases["Succeeded"] - phases["Failed"]
            made_to_fail = injected[index] if indexed else sum(injected.values())
            if unfinished:
                violations.append(f"{where}: {unfinished} pod(s) removed before they finished")
            if phases["Failed"] != made_to_fail:
                violations.append(
                    f"{where}: {phases['Failed']} pod(s) failed, {made_to_fail} made to fail"
                )
            if indexed and phases["Succeeded"] > 1:
                violations.append(f"{where}: {phases['Succeeded']} pods succeeded")
    return violations


def _group_of(event: Change) -> str:
    group: str = (event.obj["spec"].get("schedulingGroup") or {}).get("podGroupName", "")
    return group


def gangs_whole(journal: Iterable[Change], gangs: dict[str, int]) -> list[str]:
    """No gang is partly bound: of each gang, no member or at least its minCount ever got a
    node."""
    bound: Counter[str] = Counter()
    for events in _pods(journal).values():
        group = _group_of(events[0])
        if group in gangs and any(e.obj["spec"].get("nodeName") for e in events):
            bound[group] += 1
    return [
        f"gang {name}: {bound[name]} of {count} members bound"
        for name, count in sorted(gangs.items())
        if 0 < bound[name] < count
    ]


def deleted_once(*logs: Logged) -> list[str]:
    """No pod is deleted twice: no two deletes of one pod (name and uid) both succeed, by
    one daemon or by several."""
    deletes: Counter[tuple[str, str]] = Counter()
    for logged in logs:
        decisions = {seq: e for seq, e in logged if isinstance(e, Decided)}
        for _, event in logged:
            if isinstance(event, Outcome) and event.ok and event.decision in decisions:
                intent = decisions[event.decision].intents[event.index]
                if isinstance(intent, Delete) and intent.kind == "Pod":
                    deletes[(intent.ref, intent.precondition_uid)] += 1
    return [f"{ref} deleted {n} times" for (ref, _), n in sorted(deletes.items()) if n > 1]


def one_cluster_each(workers: Mapping[str, Sequence[Change]], jobs: Iterable[str]) -> list[str]:
    """No workload runs in two clusters: of each dispatched Job, pods got a node in one
    worker at most."""
    ran: dict[str, set[str]] = defaultdict(set)
    for worker, journal in workers.items():
        for changes in _pods(journal).values():
            job = (changes[0].obj["metadata"].get("labels") or {}).get(JOB_NAME)
            if job is not None and any(c.obj["spec"].get("nodeName") for c in changes):
                ran[job].add(worker)
    return [f"Job {job} ran in {', '.join(sorted(ran[job]))}" for job in jobs if len(ran[job]) > 1]


def no_eviction_after_abort(logged: Logged) -> list[str]:
    """No victim is evicted for an aborted preemption: once a workload's claim is aborted,
    no delete of a pod is decided for it until it reserves again."""
    aborted: dict[str, int] = {}
    violations: list[str] = []
    for seq, event in logged:
        if not isinstance(event, Decided) or event.reconciler != "multicluster":
            continue
        if event.reason.startswith("Aborted:"):
            aborted[event.key] = seq
        elif "Reserved:" in event.reason:
            aborted.pop(event.key, None)
        elif event.key in aborted:
            for intent in event.intents:
                if isinstance(intent, Delete) and intent.kind == "Pod":
                    violations.append(
                        f"{intent.ref} deleted at seq {seq} for {event.key}, whose claim was "
                        f"aborted at seq {aborted[event.key]}"
                    )
    return violations


def _acting(logged: Logged) -> list[tuple[int, int]]:
    """When a log's daemon acted: per start, from its first decision to its last outcome
    (ms)."""
    spans: list[tuple[int, int]] = []
    first = last = None
    for _, event in logged:
        if isinstance(event, Started):
            if first is not None and last is not None:
                spans.append((first, last))
            first = last = None
        elif isinstance(event, Decided | Outcome):
            first = event.at if first is None else first
            last = event.at
    if first is not None and last is not None:
        spans.append((first, last))
    return spans


def one_acts_at_a_time(logs: Sequence[Logged]) -> list[str]:
    """Of daemons under one Lease, never two act at once: the spans in which each decided
    and acted do not overlap (where any two do, two neighbours in start order do)."""
    spans = sorted((span, i) for i, logged in enumerate(logs) for span in _acting(logged))
    return [
        f"daemons {a} and {b} acted at once: {sa[0]}-{sa[1]} and {sb[0]}-{sb[1]} ms"
        for (sa, a), (sb, b) in itertools.pairwise(spans)
        if a != b and sb[0] <= sa[1]
    ]


def logged_exactly_once(
    journal: Sequence[Change], logged: Logged, cluster: str, until: int | None = None
) -> list[str]:
    """Every change of a watched kind is in the log once, and nothing else is.

    A change the log lacks is one only a list can account for (a watch lost or expired, the
    daemon down): then the first list at or after it must have logged the object as it stood
    at that list, or its deletion, unless the log never held the object at all. A change
    after `until`, the cluster's newest version when the log was last found caught up, came
    while the daemon was stopping: only the list of its next start would log it."""
    lists: dict[str, list[int]] = defaultdict(list)
    seen: Counter[tuple[str, str, str, str]] = Counter()
    versions: set[tuple[str, str, str]] = set()
    deleted: set[tuple[str, str]] = set()
    known: set[tuple[str, str]] = set()
    for _, event in logged:
        if isinstance(event, Resynced) and event.cluster == cluster and event.resource_version:
            lists[event.kind].append(int(event.resource_version))
        elif isinstance(event, Observed) and event.cluster == cluster:
            seen[(event.kind, event.uid, event.resource_version, event.change)] += 1
            known.add((event.kind, event.uid))
            if event.change == "DELETED":
                deleted.add((event.kind, event.uid))
            else:
                versions.add((event.kind, event.uid, event.resource_version))
    violations = [
        f"{kind} {uid} at {rv} {change} logged {n} times"
        for (kind, uid, rv, change), n in sorted(seen.items())
        if n > 1
    ]
    history: dict[tuple[str, str], list[Change]] = defaultdict(list)
    for change in journal:
        history[(change.kind, change.uid)].append(change)
    made = {(c.kind, c.uid, str(c.rv)) for c in journal}
    for kind, uid, rv in sorted(versions - made):
        violations.append(f"{kind} {uid} at {rv} logged, never in the cluster")
    for key, changes in history.items():
        kind = key[0]
        if kind not in lists:
            continue
        for change in changes:
            if _in_log(change, key, versions, deleted) or (until is not None and change.rv > until):
                continue
            later = [at for at in sorted(lists[kind]) if at >= change.rv]
            if not later:
                violations.append(f"{kind} {key[1]} at {change.rv} {change.type}: not in the log")
                continue
            state = [c for c in changes if c.rv <= later[0]][-1]
            if not _in_log(state, key, versions, deleted) and (
                state.type != "DELETED" or key in known
            ):
                violations.append(
                    f"{kind} {key[1]} at {change.rv} {change.type}: not in the log, nor its "
                    f"state at the list of {later[0]}"
                )
    return violations


def _in_log(
    change: Change,
    key: tuple[str, str],
    versions: set[tuple[str, str, str]],
    deleted: set[tuple[str, str]],
) -> bool:
    if change.type == "DELETED":
        return key in deleted
    return (*key, str(change.rv)) in versions


def held(sim: SimCluster) -> dict[tuple[str, str], str]:
    """Each object the simulated cluster holds now: its resourceVersion, by kind and uid."""
    return {
        (table.resource.kind, stored.obj["metadata"]["uid"]): str(stored.rv)
        for table in sim.store.tables.values()
        for stored in sim.store.iter_objects(table.resource)
    }


def log_behind(current: Mapping[tuple[str, str], str], logged: Logged, cluster: str) -> list[str]:
    """Where the log's newest version of an object differs from the cluster's (`current`:
    resourceVersions by kind and uid), for the kinds the log lists (empty once the log has
    caught up)."""
    newest: dict[tuple[str, str], str] = {}
    kinds: set[str] = set()
    for _, event in logged:
        if isinstance(event, Resynced) and event.cluster == cluster and event.resource_version:
            kinds.add(event.kind)
        elif isinstance(event, Observed) and event.cluster == cluster:
            key = (event.kind, event.uid)
            if event.change == "DELETED":
                newest.pop(key, None)
            else:
                newest[key] = event.resource_version
    now = {key: rv for key, rv in current.items() if key[0] in kinds}
    return [
        f"{kind} {uid}: log at {newest.get((kind, uid), 'absent')}, "
        f"cluster at {now.get((kind, uid), 'absent')}"
        for kind, uid in sorted(newest.keys() | now.keys())
        if newest.get((kind, uid)) != now.get((kind, uid))
    ]
