"""`kbatchd replay LOG --explain KIND/NAMESPACE/NAME`: one object's life, from the log.

Everything the log knows about the object, in seq order: each observed change of it and of
the objects it controls (a Job's pods, a JobSet's Jobs and theirs, a PodGroup's members),
each decision about it or touching those objects (a decision about another key that deletes
its pods is how a preemption shows) with its reason, each intent of those decisions and the
outcome the actuator recorded for it.

Finding them stays cheap on a large log: the store matches the ref column of one namespace in
SQLite (`EventLog.events_under`), and outcomes, which carry no ref, are found by reading
forward from each decision only until its outcomes are in (the state at the end says which
intents never got one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgspec

from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import SlimObject
from events.reasons import CATEGORIES, categorize, heads, placement, render_placement
from events.replay import Progress, Replayed, iso_time, plain, rebuild, started_text
from events.schema import STARTED_REF, Decided, Event, Observed, Outcome, Started
from events.state import TABLES
from events.store import EventLog

# Events read per step while looking for a decision's outcomes (they follow it closely).
_OUTCOME_WINDOW: Final = 1_000
# Changes shown per observed event in the text; --json has them all.
_SHOWN_CHANGES: Final = 8
_VALUE_WIDTH: Final = 60
_SHOWN_FAMILY: Final = 8
# Shown first when they change, then the rest in field order.
_FIRST: Final[tuple[str, ...]] = ("phase", "node_name", "deletion_ts", "ready", "spec.suspend")
# Shown when an object is first seen (besides its True conditions).
_BRIEF: Final[tuple[str, ...]] = (
    "phase",
    "node_name",
    "ready",
    "unschedulable",
    "pod_group",
    "requests.nvidia.com/gpu",
    "spec.suspend",
    "spec.parallelism",
    "spec.completions",
    "spec.completionMode",
    "deletion_ts",
)
_TIMES: Final = frozenset({"created", "deletion_ts", "finished", "ready_changed"})
_NOISE: Final = frozenset({"rv", "kind"})


class ExplainError(ValueError):
    """Nothing to explain: the message says what was looked for."""


async def explain(
    log: EventLog,
    kind: str,
    namespace: str,
    name: str,
    *,
    until: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The life of ``kind namespace/name`` up to `until`, on every cluster it exists on."""
    replayed = await rebuild(log, until=until, progress=progress)
    state = replayed.state
    # Every cluster the log knows of: the object may be gone, or never observed at all (a
    # controller of pods that kbatchd does not watch) and still have decisions and children.
    clusters = sorted(
        {key.split("/", 1)[0] for table in TABLES for key in state.table(table)}
        | {mark.split("/", 1)[0] for mark in state.synced}
    )
    found = []
    for cluster in clusters:
        ref = f"{kind}/{cluster}/{namespace}/{name}"
        life = await _life(log, replayed, ref)
        if life is not None:
            found.append(life)
    if not found:
        where = f"{namespace}/{name}" if namespace else name
        raise ExplainError(f"{log.path}: no {kind} {where} up to seq {state.seq}")
    return {"seq": state.seq, "objects": found}


async def _life(log: EventLog, replayed: Replayed, ref: str) -> dict[str, Any] | None:
    _, cluster, namespace, _ = ref.split("/", 3)
    until = replayed.last_seq
    # One scan of the ref column in SQLite, with the daemon's starts: for a namespaced object
    # everything in its namespace that has a ref (the object, whatever it controls, and the
    # decisions about any of them); for a cluster-scoped one (a Node) its own events, and
    # those of any object whose ref it begins (node n1, node n10), which the family leaves out.
    prefixes = [f"{k}/{cluster}/{namespace}/" for k in TABLES] if namespace else [ref]
    events = await log.events_under([*prefixes, STARTED_REF], until)
    family = _family(ref, events)
    chosen: list[tuple[int, Event]] = []
    decisions: dict[int, Decided] = {}
    starts: list[tuple[int, Event]] = []
    for seq, event in events:
        if isinstance(event, Started):
            starts.append((seq, event))
        elif isinstance(event, Observed):
            if event.ref in family:
                chosen.append((seq, event))
        elif isinstance(event, Decided) and (
            event.key in family or any(i.ref in family for i in event.intents)
        ):
            chosen.append((seq, event))
            if event.intents:
                decisions[seq] = event
    obj = replayed.state.get(ref)
    if not chosen and obj is None:
        return None
    pending = {seq: list(f.pending) for seq, f in replayed.state.inflight.items()}
    outcomes = await _outcomes(log, decisions, pending, until)
    chosen.extend(outcomes)
    # A daemon that started during the object's life: the decisions after it are its own
    # (and intents it found without an outcome were marked unconfirmed).
    if chosen:
        first, last = min(seq for seq, _ in chosen), max(seq for seq, _ in chosen)
        chosen.extend((seq, event) for seq, event in starts if first < seq < last)
    chosen.sort(key=lambda pair: pair[0])
    entries = _entries(ref, family, chosen, decisions, pending)
    return {
        "ref": ref,
        "object": plain(obj) if obj is not None else None,
        "family": sorted(family - {ref}),
        "totals": _totals(entries),
        "entries": entries,
    }


def _family(ref: str, events: Iterable[tuple[int, Event]]) -> set[str]:
    """`ref` and every object it controls, directly or through another (a JobSet's Jobs'
    pods), and the member pods of a PodGroup in it. Found over all the events, not in order:
    an initial list may show pods before their Job."""
    parents: dict[str, set[str]] = {}
    for _, event in events:
        if not isinstance(event, Observed):
            continue
        obj = event.obj
        prefix = f"{event.cluster}/{obj.namespace}"
        owner = obj.controller
        if owner is not None:
            parents.setdefault(event.ref, set()).add(f"{owner.kind}/{prefix}/{owner.name}")
        group = getattr(obj, "pod_group", "")
        if group:
            parents.setdefault(event.ref, set()).add(f"PodGroup/{prefix}/{group}")
    family = {ref}
    grown = True
    while grown:
        grown = False
        for child, above in parents.items():
            if child not in family and above & family:
                family.add(child)
                grown = True
    return family


async def _outcomes(
    log: EventLog, decisions: dict[int, Decided], pending: dict[int, list[int]], until: int
) -> list[tuple[int, Outcome]]:
    """The outcomes of `decisions`' intents, reading forward from each decision only as far
    as its outcomes go; intents still pending at `until` are not waited for."""
    wanted: dict[int, set[int]] = {}
    for seq, decided in decisions.items():
        missing = set(range(len(decided.intents))) - set(pending.get(seq, ()))
        if missing:
            wanted[seq] = missing
    found: list[tuple[int, Outcome]] = []
    cursor = 1
    for seq in sorted(wanted):
        # Outcomes come after their decision, and every event before `cursor` was read.
        start = max(cursor, seq + 1)
        while wanted[seq] and start <= until:
            end = min(start + _OUTCOME_WINDOW - 1, until)
            async for batch in log.read_batches(from_seq=start, until=end):
                for at, event in batch:
                    if type(event) is Outcome and event.index in wanted.get(event.decision, ()):
                        wanted[event.decision].discard(event.index)
                        found.append((at, event))
            cursor = start = end + 1
    return found


# ---------------------------------------------------------------------------------------------
# Entries: plain data for --json, rendered to text below.


def _entries(
    ref: str,
    family: set[str],
    chosen: list[tuple[int, Event]],
    decisions: dict[int, Decided],
    pending: dict[int, list[int]],
) -> list[dict[str, Any]]:
    last: dict[str, dict[str, str]] = {}
    entries: list[dict[str, Any]] = []
    for seq, event in chosen:
        base: dict[str, Any] = {"seq": seq, "at": iso_time(event.at)}
        if isinstance(event, Observed):
            entries.append(base | _observed(ref, event, last))
        elif isinstance(event, Decided):
            entries.append(base | _decided(ref, family, seq, event, pending.get(seq, [])))
        elif isinstance(event, Outcome):
            intent = decisions[event.decision].intents[event.index]
            entries.append(
                base
                | {
                    "type": "outcome",
                    "decision": event.decision,
                    "index": event.index,
                    "intent": intent_text(intent, _cluster_of(decisions[event.decision].key)),
                    "ok": event.ok,
                    "code": event.code,
                    "message": event.message,
                }
            )
        elif isinstance(event, Started):
            entries.append(
                base | {"type": "started", "version": event.version, "rules": event.rules}
            )
    return entries


def _observed(ref: str, event: Observed, last: dict[str, dict[str, str]]) -> dict[str, Any]:
    obj = event.obj
    flat = flatten(obj)
    before = last.get(event.ref)
    if event.change == "DELETED":
        last.pop(event.ref, None)
        changes: dict[str, list[str | None]] = {}
    else:
        last[event.ref] = flat
        changes = diff(before, flat) if before is not None else brief(flat)
    return {
        "type": "observed",
        "ref": event.ref,
        "object": f"{event.kind} {obj.name}",
        "relation": "self" if event.ref == ref else "controlled",
        "change": event.change,
        "changes": changes,
    }


def _decided(
    ref: str, family: set[str], seq: int, event: Decided, pending: list[int]
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": "decided",
        "reconciler": event.reconciler,
        "key": event.key,
        "about": "self" if event.key == ref else ("controlled" if event.key in family else "other"),
        "reason": event.reason,
        "heads": heads(event.reason),
        "category": categorize(event.reason),
        "intents": [
            {"index": i, "op": intent.__struct_config__.tag, "ref": intent.ref}
            | {"text": intent_text(intent, _cluster_of(event.key)), "touches": intent.ref in family}
            for i, intent in enumerate(event.intents)
        ],
        "pending": pending,
    }
    found = placement(event.reason)
    if found is not None:
        entry["placement"] = found
    return entry


def _totals(entries: list[dict[str, Any]]) -> dict[str, Any]:
    categories: dict[str, int] = {}
    for entry in entries:
        if entry["type"] == "decided":
            categories[entry["category"]] = categories.get(entry["category"], 0) + 1
    return {
        "observed": sum(1 for e in entries if e["type"] == "observed"),
        "decisions": sum(1 for e in entries if e["type"] == "decided"),
        "intents": sum(len(e["intents"]) for e in entries if e["type"] == "decided"),
        "failed": sum(1 for e in entries if e["type"] == "outcome" and not e["ok"]),
        "pending": sum(len(e["pending"]) for e in entries if e["type"] == "decided"),
        "categories": categories,
        "first": entries[0]["at"] if entries else None,
        "last": entries[-1]["at"] if entries else None,
    }


# ---------------------------------------------------------------------------------------------
# Objects as flat fields, and what changed between two versions


def flatten(obj: SlimObject) -> dict[str, str]:
    """An object as ``dotted.path -> short text``: nested maps become paths, a list of
    conditions (maps with a ``type``) becomes one path per condition type."""
    flat: dict[str, str] = {}
    _flatten_into(flat, "", plain(obj))
    return flat


def _flatten_into(flat: dict[str, str], path: str, value: Any) -> None:
    if isinstance(value, dict):
        if not value and path:
            return
        for key, item in value.items():
            if not path and key in _NOISE:
                continue
            _flatten_into(flat, f"{path}.{key}" if path else str(key), item)
        return
    if (
        isinstance(value, list)
        and value
        and all(isinstance(c, dict) and "type" in c for c in value)
    ):
        for condition in value:
            status = condition.get("status", "")
            reason = condition.get("reason")
            flat[f"{path}.{condition['type']}"] = f"{status} ({reason})" if reason else status
        return
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        # Containers, volumes...: one path per item, so a change names what changed in it.
        for index, item in enumerate(value):
            _flatten_into(flat, f"{path}[{index}]", item)
        return
    if value is None or value == [] or value == "":
        return
    if path in _TIMES and isinstance(value, int):
        flat[path] = iso_time(value)
    elif isinstance(value, str):
        flat[path] = value
    else:
        flat[path] = msgspec.json.encode(value).decode()


def diff(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str | None]]:
    """``path -> [old, new]`` for every field that differs (None: absent), the most telling
    fields first."""
    keys = [k for k in _FIRST if k in before or k in after]
    keys += [k for k in after if k not in keys]
    keys += [k for k in before if k not in keys]
    return {k: [before.get(k), after.get(k)] for k in keys if before.get(k) != after.get(k)}


def brief(flat: dict[str, str]) -> dict[str, list[str | None]]:
    """The fields worth showing of an object seen for the first time."""
    shown: dict[str, list[str | None]] = {k: [None, flat[k]] for k in _BRIEF if k in flat}
    for key, value in flat.items():
        if ".conditions." in f".{key}" and value.startswith("True"):
            shown[key] = [None, value]
    return shown


def _cluster_of(key: str) -> str:
    """The cluster of a decision's key (``Kind/cluster/namespace/name``)."""
    parts = key.split("/")
    return parts[1] if len(parts) > 1 else ""


def intent_text(intent: Intent, home: str = "") -> str:
    """``create Pod train-0-abc``, ``patch Job train status (status.active)``, ...; an intent
    to a cluster other than `home` (the decision's) names it: ``delete Pod fill-0 in w2``."""
    op = intent.__struct_config__.tag
    head = f"{op} {intent.kind} {intent.name}"
    if home and intent.cluster != home:
        head += f" in {intent.cluster}"
    if isinstance(intent, Bind):
        return f"{head} → {intent.node}"
    if isinstance(intent, Delete):
        grace = f" (grace {intent.grace_seconds}s)" if intent.grace_seconds is not None else ""
        return head + grace
    if isinstance(intent, Patch):
        sub = f" {intent.subresource}" if intent.subresource else ""
        return f"{head}{sub} ({patch_text(intent.patch)})"
    if isinstance(intent, Create):
        return head
    raise TypeError(f"unknown intent {intent!r}")  # pragma: no cover


def patch_text(patch: dict[str, Any] | list[Any]) -> str:
    """What a patch changes, in a few words: its paths, finalizer removals spelled out."""
    if isinstance(patch, list):
        return ", ".join(f"{op.get('op')} {op.get('path')}" for op in patch if isinstance(op, dict))
    parts: list[str] = []
    for key, value in patch.items():
        if key == "metadata" and isinstance(value, dict):
            for field, item in value.items():
                if field.startswith("$deleteFromPrimitiveList/"):
                    parts.append(f"remove {field.split('/', 1)[1]} {', '.join(map(str, item))}")
                elif field != "uid":  # a precondition, not a change
                    parts.append(f"metadata.{field}")
        elif isinstance(value, dict) and value:
            parts.extend(f"{key}.{field}" for field in value)
        else:
            parts.append(key)
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Text


def render(data: dict[str, Any]) -> str:
    blocks = [_render_life(life, data["seq"]) for life in data["objects"]]
    return "\n\n".join(blocks)


def _render_life(life: dict[str, Any], seq: int) -> str:
    totals = life["totals"]
    present = "gone" if life["object"] is None else "present"
    counts = totals["categories"]
    categories = ", ".join(f"{counts[c]} {c}" for c in CATEGORIES if c in counts)
    family = [ref.split("/", 1)[0] + " " + ref.rsplit("/", 1)[-1] for ref in life["family"]]
    shown = ", ".join(family[:_SHOWN_FAMILY])
    if len(family) > _SHOWN_FAMILY:
        shown += f" and {len(family) - _SHOWN_FAMILY} more"
    lines = [
        f"{life['ref']} at seq {seq:,}: {present}",
        f"  controls: {shown or 'nothing'}",
        f"  {totals['observed']} observed change(s) · {totals['decisions']} decision(s)"
        + (f" ({categories})" if categories else "")
        + f" · {totals['intents']} action(s), {totals['failed']} failed, "
        f"{totals['pending']} without outcome",
    ]
    day = ""
    for entry in life["entries"]:
        date, clock = entry["at"][:10], entry["at"][11:23]
        if date != day:
            day = date
            lines.append(date)
        lines.extend(_render_entry(entry, f"{clock}  {entry['seq']:>8,}  "))
    return "\n".join(lines)


def _render_entry(entry: dict[str, Any], lead: str) -> list[str]:
    pad = " " * len(lead)
    if entry["type"] == "observed":
        what = f"{entry['object']} {entry['change']}"
        return [f"{lead}{what}" + (f": {_changes(entry['changes'])}" if entry["changes"] else "")]
    if entry["type"] == "outcome":
        verdict = "ok" if entry["ok"] else f"FAILED {entry['code']} {entry['message']}".rstrip()
        return [f"{lead}{verdict}: {entry['intent']} (decision {entry['decision']:,})"]
    if entry["type"] == "started":
        return [lead + started_text(entry["version"], entry["rules"])]
    whose = "" if entry["about"] == "self" else f" about {entry['key']}"
    lines = [f"{lead}decided by {entry['reconciler']}{whose} [{entry['category']}]"]
    lines.append(f"{pad}  {entry['reason']}")
    if "placement" in entry:
        lines.append(f"{pad}  not admitted: {render_placement(entry['placement'])}")
    if entry["about"] == "other":
        touched = [i["text"] for i in entry["intents"] if i["touches"]]
        lines.append(f"{pad}  by {entry['key']}, which touches: {'; '.join(touched)}")
    for intent in entry["intents"]:
        waiting = " (no outcome yet)" if intent["index"] in entry["pending"] else ""
        lines.append(f"{pad}  → {intent['text']}{waiting}")
    return lines


def _changes(changes: dict[str, list[str | None]]) -> str:
    parts = []
    for key, (old, new) in list(changes.items())[:_SHOWN_CHANGES]:
        if key == "deletion_ts":
            parts.append("deleting" if new is not None else "deletion cancelled")
        elif old is None:
            parts.append(f"{key}={_short(new)}")
        else:
            parts.append(f"{key} {_short(old)}→{_short(new)}")
    more = len(changes) - _SHOWN_CHANGES
    return ", ".join(parts) + (f" (+{more} more, --json lists them)" if more > 0 else "")


def _short(value: str | None) -> str:
    if value is None:
        return "∅"
    return value if len(value) <= _VALUE_WIDTH else value[: _VALUE_WIDTH - 1] + "…"
