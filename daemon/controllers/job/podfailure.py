"""`spec.podFailurePolicy` matching (upstream `pod_failure_policy.go`).

Rules are tried in order on a pod the controller considers failed; the first that matches
decides. A matching `FailJob` yields the exact message upstream writes into the
`FailureTarget`/`Failed` conditions. Unknown actions are skipped, like upstream does.
"""

from __future__ import annotations

from typing import Final

import msgspec

from daemon.controllers.job.spec import OnExitCodes, PodFailurePolicy, PodFailurePolicyRule
from events.objects import Pod

FAIL_JOB: Final = "FailJob"
FAIL_INDEX: Final = "FailIndex"
IGNORE: Final = "Ignore"
COUNT: Final = "Count"


class Match(msgspec.Struct, frozen=True):
    """The policy's verdict on one failed pod: the matching action (None when no rule
    matched), whether the failure counts towards `status.failed` and the back-off limits,
    and the Job failure message for `FailJob`."""

    action: str | None = None
    counts: bool = True
    message: str | None = None


NO_MATCH: Final = Match()


def match(policy: PodFailurePolicy | None, pod: Pod) -> Match:
    if policy is None:
        return NO_MATCH
    for index, rule in enumerate(policy.rules):
        verdict = _match_rule(rule, index, pod)
        if verdict is not None:
            return verdict
    return NO_MATCH


def _match_rule(rule: PodFailurePolicyRule, index: int, pod: Pod) -> Match | None:
    if rule.on_exit_codes is not None:
        container = _matching_container(rule.on_exit_codes, pod)
        if container is None:
            return None
        code = pod.exit_codes[container]
        subject = (
            f"Container {container} for pod {pod.namespace}/{pod.name} failed with exit code {code}"
        )
    elif rule.on_pod_conditions is not None:
        condition = _matching_condition(rule, pod)
        if condition is None:
            return None
        subject = f"Pod {pod.namespace}/{pod.name} has condition {condition}"
    else:
        return None
    if rule.action == IGNORE:
        return Match(IGNORE, counts=False)
    if rule.action == FAIL_INDEX:
        return Match(FAIL_INDEX)
    if rule.action == COUNT:
        return Match(COUNT)
    if rule.action == FAIL_JOB:
        return Match(FAIL_JOB, message=f"{subject} matching FailJob rule at index {index}")
    return None


def _matching_container(requirement: OnExitCodes, pod: Pod) -> str | None:
    # `exit_codes` holds terminated containers only, app containers before init containers,
    # which is the order upstream searches in.
    for name, code in pod.exit_codes.items():
        if requirement.container_name is not None and requirement.container_name != name:
            continue
        if code == 0:
            continue
        listed = code in requirement.values
        if (requirement.operator == "In" and listed) or (
            requirement.operator == "NotIn" and not listed
        ):
            return name
    return None


def _matching_condition(rule: PodFailurePolicyRule, pod: Pod) -> str | None:
    patterns = rule.on_pod_conditions or ()
    for type_, status in pod.conditions.items():
        for pattern in patterns:
            if pattern.type == type_ and pattern.status == status:
                return type_
    return None
