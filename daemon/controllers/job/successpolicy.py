"""`spec.successPolicy` matching (upstream `success_policy.go`): an Indexed Job may succeed
before every index has, once its succeeded indexes satisfy one of the rules."""

from __future__ import annotations

from daemon.controllers.job.indexes import Indexes
from daemon.controllers.job.spec import SuccessPolicy


def success_policy_message(
    policy: SuccessPolicy | None, completions: int, succeeded: Indexes
) -> str | None:
    """upstream `matchSuccessPolicy`: the message of the first rule the succeeded indexes
    satisfy, None when none does."""
    if policy is None or not succeeded:
        return None
    for index, rule in enumerate(policy.rules):
        if rule.succeeded_indexes is not None:
            required = Indexes.parse(rule.succeeded_indexes, completions)
            if not required:
                continue
            contained = required.overlap(succeeded)
            if contained == required.total() or (
                rule.succeeded_count is not None and contained >= rule.succeeded_count
            ):
                return f"Matched rules at index {index}"
        elif rule.succeeded_count is not None and succeeded.total() >= rule.succeeded_count:
            return f"Matched rules at index {index}"
    return None
