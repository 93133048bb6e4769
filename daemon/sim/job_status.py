"""Job status validation: the API server's rules for status writes by an external
controller (spec/job-and-jobset.md A4, rules 1-23). Each rule only runs when a field it looks
at changes, so an unrelated write to an already inconsistent Job is accepted."""

from __future__ import annotations

from typing import Any, Final

from daemon.sim.errors import OMIT, FieldError, invalid, required
from daemon.sim.store import parse_rfc3339
from daemon.sim.validation import condition_true, non_negative

Obj = dict[str, Any]

# `JobStatus`'s fields that are plain (not pointer) and omitempty in Go: the server stores and
# serves them absent when zero. `ready` and `terminating` are pointers: their 0 stays.
_OMITTED_WHEN_ZERO: Final = (
    ("active", 0),
    ("succeeded", 0),
    ("failed", 0),
    ("completedIndexes", ""),
)


def stored_status(status: Obj) -> Obj:
    """A written Job status as the real server stores it: its zero counters dropped."""
    zeros = [
        field
        for field, zero in _OMITTED_WHEN_ZERO
        if field in status and type(status[field]) is type(zero) and status[field] == zero
    ]
    if not zeros:
        return status
    return {k: v for k, v in status.items() if k not in zeros}


# -- job status (spec A4) -------------------------------------------------------------------


def _interval_set(text: Any, limit: int | None) -> set[int] | None:
    """Parse the compressed interval format ("1,3-5,7"); None when malformed."""
    if text is None or text == "":
        return set()
    if not isinstance(text, str):
        return None
    indexes: set[int] = set()
    previous = -1
    for part in text.split(","):
        low_text, _, high_text = part.partition("-")
        if not low_text.isdigit() or (high_text and not high_text.isdigit()):
            return None
        low = int(low_text)
        high = int(high_text) if high_text else low
        if low <= previous or high < low or (limit is not None and high >= limit):
            return None
        indexes.update(range(low, high + 1))
        previous = high
    return indexes


def _time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def job_status_update(old: Obj, new: Obj) -> list[FieldError]:
    """The API server's rules for Job status writes (spec A4, rules 1-23)."""
    errors: list[FieldError] = []
    spec = new.get("spec") or {}
    o, n = old.get("status") or {}, new.get("status") or {}

    def changed(*fields: str) -> bool:
        return any(o.get(f) != n.get(f) for f in fields)

    def cond(status: Obj, type_: str) -> bool:
        return condition_true(status, type_)

    def cond_changed(*types: str) -> bool:
        return any(cond(o, t) != cond(n, t) for t in types)

    for field in ("active", "succeeded", "failed", "ready", "terminating"):
        errors += non_negative(n.get(field), f"status.{field}")
    uncounted = n.get("uncountedTerminatedPods") or {}
    for part in ("succeeded", "failed"):
        seen: set[str] = set()
        for i, uid in enumerate(uncounted.get(part) or () if isinstance(uncounted, dict) else ()):
            path = f"status.uncountedTerminatedPods.{part}[{i}]"
            if not uid:
                errors.append(required(path))
            elif uid in seen:
                errors.append(FieldError(path, "FieldValueDuplicate", value=uid))
            seen.add(uid)
    if (o.get("failed") or 0) > (n.get("failed") or 0):
        errors.append(
            invalid("status.failed", n.get("failed"), "cannot decrease the failed counter")
        )
    elastic = spec.get("completionMode") == "Indexed" and spec.get("completions") == spec.get(
        "parallelism"
    )
    if (o.get("succeeded") or 0) > (n.get("succeeded") or 0) and not elastic:
        errors.append(
            invalid("status.succeeded", n.get("succeeded"), "cannot decrease the succeeded counter")
        )
    for type_ in ("Failed", "Complete", "FailureTarget", "SuccessCriteriaMet"):
        if cond(o, type_) and not cond(n, type_):
            errors.append(
                invalid(
                    "status.conditions", OMIT, f"cannot disable the terminal {type_}=True condition"
                )
            )
    complete, failed = cond(n, "Complete"), cond(n, "Failed")
    target, criteria = cond(n, "FailureTarget"), cond(n, "SuccessCriteriaMet")
    if complete and failed and cond_changed("Complete", "Failed"):
        errors.append(
            invalid(
                "status.conditions", OMIT, "cannot set Complete=True and Failed=true conditions"
            )
        )
    if complete and target and cond_changed("Complete", "FailureTarget"):
        errors.append(
            invalid(
                "status.conditions",
                OMIT,
                "cannot set Complete=True and FailureTarget=true conditions",
            )
        )
    if criteria and failed:
        errors.append(
            invalid(
                "status.conditions",
                OMIT,
                "cannot set SuccessCriteriaMet=True and Failed=true conditions",
            )
        )
    if criteria and target:
        errors.append(
            invalid(
                "status.conditions",
                OMIT,
                "cannot set SuccessCriteriaMet=True and FailureTarget=true conditions",
            )
        )
    if failed and not target and cond_changed("Failed", "FailureTarget"):
        errors.append(
            required(
                "status.conditions",
                "cannot set Failed=True condition without the FailureTarget=true condition",
            )
        )
    if (
        complete
        and not criteria
        and (cond_changed("Complete", "SuccessCriteriaMet") or spec.get("successPolicy"))
    ):
        errors.append(
            required(
                "status.conditions",
                "cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
            )
        )
    if cond(o, "Complete") and not cond(o, "SuccessCriteriaMet") and criteria:
        errors.append(
            invalid(
                "status.conditions",
                OMIT,
                "cannot set SuccessCriteriaMet=True for a Job that is already Complete",
            )
        )
    completion = n.get("completionTime")
    if (
        completion is not None
        and not complete
        and (cond_changed("Complete") or changed("completionTime"))
    ):
        errors.append(
            invalid(
                "status.completionTime",
                completion,
                "cannot set completionTime when there is no Complete=True condition",
            )
        )
    if complete and completion is None and (cond_changed("Complete") or changed("completionTime")):
        errors.append(
            required("status.completionTime", "completionTime is required for Complete jobs")
        )
    mutated = o.get("completionTime") is not None and completion != o.get("completionTime")
    if mutated and (completion is not None or complete):
        errors.append(
            invalid("status.completionTime", completion, "completionTime cannot be mutated")
        )
    start = n.get("startTime")
    if completion is not None and start is not None and changed("startTime", "completionTime"):
        start_t, completion_t = _time(start), _time(completion)
        if start_t is not None and completion_t is not None and completion_t < start_t:
            errors.append(
                invalid(
                    "status.completionTime",
                    completion,
                    "completionTime cannot be set before startTime",
                )
            )
    finished = complete or failed
    finished_changed = cond_changed("Complete", "Failed")
    if finished and (n.get("active") or 0) > 0 and (finished_changed or changed("active")):
        errors.append(
            invalid("status.active", n.get("active"), "active>0 is invalid for finished job")
        )
    if (
        finished
        and (n.get("terminating") or 0) > 0
        and (finished_changed or changed("terminating"))
    ):
        errors.append(
            invalid(
                "status.terminating",
                n.get("terminating"),
                "terminating>0 is invalid for finished job",
            )
        )
    has_uncounted = isinstance(uncounted, dict) and any(
        uncounted.get(p) for p in ("succeeded", "failed")
    )
    if finished and has_uncounted and (finished_changed or changed("uncountedTerminatedPods")):
        errors.append(
            invalid(
                "status.uncountedTerminatedPods",
                OMIT,
                "uncountedTerminatedPods needs to be empty for finished job",
            )
        )
    exempt = spec.get("suspend") is True and spec.get("completions") == 0
    if finished and start is None and not exempt and (finished_changed or changed("startTime")):
        errors.append(required("status.startTime", "startTime is required for finished job"))
    if changed("startTime") and o.get("startTime") is not None and spec.get("suspend") is not True:
        if start is None:
            errors.append(
                required("status.startTime", "startTime cannot be removed for unsuspended job")
            )
        else:
            errors.append(
                invalid(
                    "status.startTime", start, "startTime cannot be changed for unsuspended job"
                )
            )
    ready, active = n.get("ready"), n.get("active") or 0
    if isinstance(ready, int) and ready > active and changed("ready", "active"):
        errors.append(
            invalid(
                "status.ready", ready, f"cannot set more ready pods than active: {ready} > {active}"
            )
        )
    indexed = spec.get("completionMode") == "Indexed"
    completions = spec.get("completions") if isinstance(spec.get("completions"), int) else None
    completed_set: set[int] | None = set()
    if changed("completedIndexes") and n.get("completedIndexes"):
        if not indexed:
            errors.append(
                invalid(
                    "status.completedIndexes",
                    n.get("completedIndexes"),
                    "cannot set non-empty completedIndexes when non-indexed completion mode",
                )
            )
        else:
            completed_set = _interval_set(n.get("completedIndexes"), completions)
            if completed_set is None:
                errors.append(
                    invalid(
                        "status.completedIndexes",
                        n.get("completedIndexes"),
                        "error parsing completedIndexes",
                    )
                )
    if changed("failedIndexes", "completedIndexes") and n.get("failedIndexes") is not None:
        if spec.get("backoffLimitPerIndex") is None:
            errors.append(
                invalid(
                    "status.failedIndexes",
                    n.get("failedIndexes"),
                    "cannot set non-null failedIndexes when backoffLimitPerIndex is null",
                )
            )
        else:
            failed_set = _interval_set(n.get("failedIndexes"), completions)
            if failed_set is None:
                errors.append(
                    invalid(
                        "status.failedIndexes",
                        n.get("failedIndexes"),
                        "error parsing failedIndexes",
                    )
                )
            else:
                completed_set = _interval_set(n.get("completedIndexes"), completions) or set()
                overlap = sorted(failed_set & completed_set)
                if overlap:
                    errors.append(
                        invalid(
                            "status.failedIndexes",
                            n.get("failedIndexes"),
                            f"failedIndexes and completedIndexes overlap at index: {overlap[0]}",
                        )
                    )
    return errors
