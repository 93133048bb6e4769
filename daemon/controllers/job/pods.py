"""A Job's pods: which belong to it, how they are ordered for removal, and the pods it creates.

Pod names are deterministic so that the actuator can make creates idempotent, and must never
repeat within a Job's life (upstream's `generateName` gives every replacement a new random
name; a reused one would make a new pod look like an old one in logs, events and metrics).
The random 5-character suffix of `generateName` is replaced by a function of the Job uid, the
completion index and the pod's *ordinal*: its number among all the pods kbatchd created for
the Job, Job-wide and written on the pod (`POD_ORDINAL_ANNOTATION`). A decision numbers its
new pods from the fold's watermark (`State.pod_ordinals`: one more than the highest ordinal
ever observed on the Job's pods), so:

- unique: a pod kbatchd created cannot vanish before kbatchd observed it (its tracking
  finalizer holds it until kbatchd removes it, which it does only to pods it has seen), so
  the ordinal of every pod that is gone is below the watermark of any later decision, and
  no later decision can produce its name again; within one decision ordinals are distinct;
  and for one index (one name prefix) the suffix is a bijection of the ordinal below 36**5.
  An ordinal a decision uses at or above the watermark belongs at most to a pod that was
  created but is not yet observed (its outcome lost): reused for the same index it yields
  that very pod's name, so the create meets AlreadyExists instead of making a second pod;
  for another index the prefix differs;
- deterministic: the names are a function of the state, so a decision computed again from
  the same state (replay, `--verify`) names the same pods.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

from daemon.controllers.job.spec import (
    COMPLETION_INDEX,
    COMPLETION_INDEX_ENV,
    CONTROLLER_UID_LABEL,
    INDEX_FAILURE_COUNT,
    INDEX_IGNORED_FAILURE_COUNT,
    JOB_NAME_LABEL,
    LEGACY_CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    JobView,
)
from events.intents import Patch
from events.jsondata import clone
from events.objects import POD_ORDINAL_ANNOTATION, Pod

UNKNOWN_INDEX: Final = -1
# `names.MaxGeneratedNameLength`: 63 minus the 5 random characters.
MAX_GENERATED_PREFIX: Final = 58
SUFFIX_LENGTH: Final = 5
_ALPHABET: Final = "0123456789abcdefghijklmnopqrstuvwxyz"
SUFFIXES: Final = len(_ALPHABET) ** SUFFIX_LENGTH  # 60,466,176 = 2**10 * 3**10
# Coprime with SUFFIXES (odd, not a multiple of 3), so ordinal -> ordinal * stride is a
# bijection modulo SUFFIXES; near SUFFIXES / golden ratio so consecutive suffixes look unrelated.
_STRIDE: Final = 37_369_759
# controller.ActivePods ranks phases so that pods in earlier stages are removed first.
_PHASE_RANK: Final = {"Pending": 0, "Unknown": 1, "Running": 2}


def owned_pods(pods: Iterable[Pod], uid: str) -> list[Pod]:
    """Of the pods whose controller reference names the Job, those whose controller is the Job
    with `uid` (not an earlier Job of the same name), sorted by name so that every decision
    walks them in the same order."""
    result = []
    for pod in pods:
        owner = pod.controller
        if owner is not None and owner.kind == "Job" and owner.uid == uid:
            result.append(pod)
    result.sort(key=_name)
    return result


def completion_index(pod: Pod) -> int:
    value = pod.annotations.get(COMPLETION_INDEX)
    if value is None or not value.isdigit():
        return UNKNOWN_INDEX
    return int(value)


def annotation_count(pod: Pod, key: str) -> int:
    """A failure-count annotation; malformed or out-of-range values read as 0, as upstream."""
    value = pod.annotations.get(key, "")
    if not value.isdigit() or int(value) > 2**31 - 1:
        return 0
    return int(value)


def absolute_failure_count(pod: Pod) -> int:
    return annotation_count(pod, INDEX_FAILURE_COUNT) + annotation_count(
        pod, INDEX_IGNORED_FAILURE_COUNT
    )


def is_active(pod: Pod) -> bool:
    return not pod.terminal and pod.deletion_ts is None


def is_terminating(pod: Pod) -> bool:
    return not pod.terminal and pod.deletion_ts is not None


def removal_order(pod: Pod) -> tuple[bool, int, bool, int, int, str]:
    """`controller.ActivePods` as a sort key: unscheduled < scheduled, Pending < Unknown <
    Running, not ready < ready, more restarts < fewer, newer < older; the name breaks ties so
    the order is total."""
    return (
        bool(pod.node_name),
        _PHASE_RANK.get(pod.phase, 0),
        pod.ready,
        -pod.restart_count,
        -pod.created,
        pod.name,
    )


def pods_for_removal(view: JobView, active: list[Pod], at_least: int) -> list[Pod]:
    """Active pods to delete, in deletion order: for Indexed Jobs first those without a valid
    index and all but the most advanced pod of a repeated index, then the least advanced."""
    remove: list[Pod] = []
    left = active
    if view.indexed:
        remove, left = _misplaced_indexed(active, view.index_limit)
    if len(remove) < at_least:
        ordered = sorted(left, key=removal_order)
        remove += ordered[: at_least - len(remove)]
    return remove


def _misplaced_indexed(active: list[Pod], completions: int) -> tuple[list[Pod], list[Pod]]:
    remove: list[Pod] = []
    keep: list[Pod] = []
    by_index: dict[int, list[Pod]] = {}
    for pod in active:
        index = completion_index(pod)
        if index == UNKNOWN_INDEX or index >= completions:
            remove.append(pod)
        else:
            by_index.setdefault(index, []).append(pod)
    for index in sorted(by_index):
        same = by_index[index]
        if len(same) > 1:
            same.sort(key=removal_order)
            remove += same[:-1]
        keep.append(same[-1])
    remove.sort(key=lambda p: (completion_index(p), removal_order(p)))
    return remove, keep


# -- creating pods ------------------------------------------------------------------------------


def name_prefix(job_name: str, index: int | None) -> str:
    """upstream's generateName, truncated the way the API server truncates it (keeping the
    index of an Indexed pod)."""
    if index is None:
        return f"{job_name}-"[:MAX_GENERATED_PREFIX]
    tail = f"-{index}-"
    prefix = job_name + tail
    if len(prefix) > MAX_GENERATED_PREFIX:
        prefix = prefix[: MAX_GENERATED_PREFIX - len(tail)] + tail
    return prefix


def name_suffix(job_uid: str, index: int | None, ordinal: int) -> str:
    """Five characters from the ordinal: an offset drawn from the Job uid and the index, plus
    the ordinal times a stride coprime with the number of suffixes — distinct for distinct
    ordinals below `SUFFIXES`, so within one index (one name prefix) no two pods share one."""
    digest = hashlib.sha256(f"{job_uid}/{'' if index is None else index}".encode()).digest()
    offset = int.from_bytes(digest[:8], "big")
    value = (offset + ordinal * _STRIDE) % SUFFIXES
    chars = []
    for _ in range(SUFFIX_LENGTH):
        value, digit = divmod(value, len(_ALPHABET))
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def pod_name(job_name: str, job_uid: str, index: int | None, ordinal: int) -> str:
    """The name of the Job's pod with `ordinal` (for `index`; None: NonIndexed)."""
    return name_prefix(job_name, index) + name_suffix(job_uid, index, ordinal)


def pod_body(
    view: JobView,
    name: str,
    ordinal: int,
    finalizer: str,
    index: int | None,
    failure_counts: tuple[int, int] | None,
    pod_group: str | None = None,
) -> dict[str, Any]:
    """The pod to create: the Job's current template plus the Job's selector labels, the
    completion index (annotation, label, hostname, env), the per-index failure counts, the
    pod's ordinal, the controller reference, kbatchd's tracking finalizer and the PodGroup of
    the Job's gang, if it has one."""
    job = view.job
    meta = view.template_meta
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    finalizers: list[str] = list(meta.get("finalizers") or [])
    spec: dict[str, Any] = clone(view.template_spec)
    if not view.spec.manual_selector:
        labels.update(
            {
                CONTROLLER_UID_LABEL: job.uid,
                LEGACY_CONTROLLER_UID_LABEL: job.uid,
                JOB_NAME_LABEL: job.name,
                LEGACY_JOB_NAME_LABEL: job.name,
            }
        )
    if index is not None:
        annotations[COMPLETION_INDEX] = str(index)
        labels[COMPLETION_INDEX] = str(index)
        spec["hostname"] = f"{job.name}-{index}"
        _add_index_env(spec)
    if failure_counts is not None:
        failures, ignored = failure_counts
        annotations[INDEX_FAILURE_COUNT] = str(failures)
        if ignored > 0:
            annotations[INDEX_IGNORED_FAILURE_COUNT] = str(ignored)
    annotations[POD_ORDINAL_ANNOTATION] = str(ordinal)
    if pod_group is not None:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    if finalizer not in finalizers:
        finalizers.append(finalizer)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": job.namespace,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job.name,
                "uid": job.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "finalizers": finalizers,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _add_index_env(spec: dict[str, Any]) -> None:
    # The env reads the label, as upstream does since PodIndexLabel went GA.
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            if not isinstance(container, dict):
                continue
            env = container.get("env") or []
            container["env"] = env
            if any(isinstance(e, dict) and e.get("name") == COMPLETION_INDEX_ENV for e in env):
                continue
            env.append(
                {
                    "name": COMPLETION_INDEX_ENV,
                    "valueFrom": {
                        "fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}
                    },
                }
            )


def _name(pod: Pod) -> str:
    return pod.name


def release_patch(cluster: str, pod: Pod, finalizer: str) -> Patch:
    """Remove kbatchd's tracking finalizer and no other (the strategic-merge directive
    upstream uses); the uid guards against a same-named successor pod."""
    return Patch(
        cluster,
        "Pod",
        pod.namespace,
        pod.name,
        patch={"metadata": {"uid": pod.uid, "$deleteFromPrimitiveList/finalizers": [finalizer]}},
        patch_type="strategic",
    )
