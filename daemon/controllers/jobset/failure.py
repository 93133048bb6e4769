"""What a JobSet does when child Jobs of its current attempt fail (spec B3, KEP-262 with the
RestartJob extension) and when enough of them succeed (success policy, B0).

Deciding a restart only writes counters (`restarts`, `jobRestarts`) to the status; the Jobs of
the old attempt are deleted by the next decision, which sees them as *previous*, and recreated
once gone — exactly upstream's three-reconcile protocol, so a restart survives a crash at any
point (the counters are the durable record of what was decided).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

from daemon.controllers.job.status import parse_time
from daemon.controllers.jobset.jobs import Child, Children, job_condition
from daemon.controllers.jobset.spec import (
    ALL,
    COMPLETED,
    FAIL_JOBSET,
    FAILED,
    RESTART_JOB,
    RESTART_JOB_IGNORE_MAX,
    RESTART_JOBSET,
    RESTART_JOBSET_IGNORE_MAX,
    RESTARTING,
    FailurePolicyRule,
    JobSetView,
)
from daemon.controllers.jobset.status import StatusDraft

DEFAULT_ACTION: Final = RESTART_JOBSET
FAILED_JOBS_REASON: Final = "FailedJobs"
FAILED_JOBS_MESSAGE: Final = "jobset failed due to one or more job failures"
REACHED_MAX_RESTARTS: Final = "ReachedMaxRestarts"
REACHED_MAX_RESTARTS_MESSAGE: Final = "jobset failed due to reaching max number of restarts"
FAIL_JOBSET_REASON: Final = "FailJobSetFailurePolicyAction"
ALL_JOBS_COMPLETED: Final = "AllJobsCompleted"
_MESSAGES: Final = {
    FAIL_JOBSET: "applying FailJobSet failure policy action",
    RESTART_JOBSET: "applying RestartJobSet failure policy action",
    RESTART_JOBSET_IGNORE_MAX: "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
    RESTART_JOB: "applying RestartJob failure policy action",
    RESTART_JOB_IGNORE_MAX: "applying RestartJobAndIgnoreMaxRestarts failure policy action",
}


@dataclass(frozen=True)
class Verdict:
    """The failure policy's choice: the action, the rule that chose it (None: the default),
    and the failed Job it is about."""

    action: str
    rule: str | None
    child: Child


def failure_time(child: Child) -> int:
    assert child.job is not None
    condition = job_condition(child.job, "Failed") or {}
    return parse_time(condition.get("lastTransitionTime")) or 0


def first_failed(failed: list[Child]) -> Child:
    """upstream `findFirstFailedJob`: the earliest `Failed` transition; ties keep the first
    in spec order (replicatedJob order, then Job index)."""
    best = failed[0]
    for child in failed[1:]:
        if failure_time(child) < failure_time(best):
            best = child
    return best


@functools.lru_cache(maxsize=256)
def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return re.compile(text)
    except re.error:
        return None  # upstream logs an invalid pattern and skips it


def rule_applies(rule: FailurePolicyRule, child: Child) -> bool:
    """upstream `ruleIsApplicable`: the Job's `Failed` reason is listed (empty: any), its
    message matches one of the patterns (empty: any; searched, as Go's `MatchString`), and its
    replicatedJob is targeted (empty: any)."""
    assert child.job is not None
    condition = job_condition(child.job, "Failed") or {}
    reasons = rule.on_job_failure_reasons
    if reasons and condition.get("reason") not in reasons:
        return False
    patterns = rule.on_job_failure_message_patterns
    if patterns:
        message = condition.get("message") or ""
        compiled = [p for p in (_pattern(text) for text in patterns) if p is not None]
        if not any(p.search(message) for p in compiled):
            return False
    targets = rule.target_replicated_jobs
    return not targets or child.rj.name in targets


def choose(view: JobSetView, failed: list[Child]) -> Verdict:
    """upstream `findFirstFailedPolicyRuleAndJob`: rules in order, the first with a matching
    failed Job wins, and for it the earliest-failed matching Job; no match: the default
    action on the earliest-failed Job."""
    policy = view.spec.failure_policy
    for rule in (policy.rules if policy is not None else None) or ():
        matching = [c for c in failed if rule_applies(rule, c)]
        if matching:
            return Verdict(rule.action, rule.name, first_failed(matching))
    return Verdict(DEFAULT_ACTION, None, first_failed(failed))


def fail(draft: StatusDraft, reason: str, message: str) -> None:
    """upstream `setJobSetFailedCondition`, with RestartingJobSet going False (JobSetFailed)."""
    draft.set_condition(FAILED, "True", reason, message)
    draft.terminal_state = FAILED
    draft.set_condition(RESTARTING, "False", "JobSetFailed", "jobset failed")


def execute(view: JobSetView, children: Children, draft: StatusDraft) -> str:
    """Apply the failure policy to the current attempt's failed Jobs; returns the decision's
    reason."""
    failed = children.failed
    policy = view.spec.failure_policy
    if policy is None:
        first = first_failed(failed)
        fail(draft, FAILED_JOBS_REASON, f"{FAILED_JOBS_MESSAGE} (first failed job: {first.name})")
        return f"{FAILED_JOBS_REASON}: no failure policy; Job {first.name} failed"
    verdict = choose(view, failed)
    name = verdict.child.name
    rule = f"rule {verdict.rule}" if verdict.rule is not None else "default rule"
    action = verdict.action
    message = f"{_MESSAGES.get(action, action)} (first failed job: {name})"
    if action == FAIL_JOBSET:
        fail(draft, FAIL_JOBSET_REASON, message)
        return f"{FAIL_JOBSET_REASON}: {rule} fails the JobSet; Job {name} failed"
    counted = draft.restarts_towards_max + draft.job_restarts_towards_max()
    ignores_max = action in (RESTART_JOBSET_IGNORE_MAX, RESTART_JOB_IGNORE_MAX)
    if not ignores_max and counted >= policy.max_restarts:
        fail(
            draft,
            REACHED_MAX_RESTARTS,
            f"{REACHED_MAX_RESTARTS_MESSAGE} (first failed job: {name})",
        )
        return (
            f"{REACHED_MAX_RESTARTS}: {rule} ({action}) after {counted} counted restart(s) of "
            f"at most {policy.max_restarts}; Job {name} failed"
        )
    if action in (RESTART_JOB, RESTART_JOB_IGNORE_MAX):
        draft.bump_job_restarts(
            verdict.child.rj.name, verdict.child.index, towards_max=not ignores_max
        )
        return (
            f"{action}: {rule}: Job {name} failed; recreating it alone "
            f"(replicatedJob {verdict.child.rj.name} index {verdict.child.index})"
        )
    before = draft.restarts
    draft.restarts += 1
    if not ignores_max:
        draft.restarts_towards_max += 1
    reason = f"FailurePolicy_{verdict.rule}" if verdict.rule is not None else "DefaultFailurePolicy"
    draft.set_condition(RESTARTING, "True", reason, message)
    return f"{action}: {rule}: Job {name} failed; restarts {before}→{draft.restarts}"


def succeeded(view: JobSetView, children: Children) -> bool:
    """upstream `executeSuccessPolicy`'s test: `All` needs every Job of the target
    replicatedJobs (empty: all) to have succeeded, `Any` one of them."""
    policy = view.spec.success_policy
    targets = set(policy.target_replicated_jobs or ()) or {
        rj.name for rj in view.spec.replicated_jobs
    }
    matching = sum(1 for c in children.succeeded if c.rj.name in targets)
    if policy.operator == ALL:
        expected = sum(rj.replicas for rj in view.spec.replicated_jobs if rj.name in targets)
    else:
        expected = 1
    return matching >= expected


def complete(draft: StatusDraft) -> None:
    draft.set_condition(COMPLETED, "True", ALL_JOBS_COMPLETED, "jobset completed successfully")
    draft.terminal_state = COMPLETED
    draft.set_condition(RESTARTING, "False", "JobSetCompleted", "jobset completed")
