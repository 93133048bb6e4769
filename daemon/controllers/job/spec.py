"""Typed views of a Job's `spec` and `status`, decoded from the raw dicts the slim `Job` keeps.

Only the fields the Job reconciler reads. The API server defaults most of them; the views apply
the same defaults again so that a Job read from a raw manifest (tests, a replayed old log) is
interpreted the way the server would. The pod template stays a raw dict: pods are built from
it verbatim.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from daemon.controllers.job.indexes import Indexes
from events.objects import Job, JobSet

MAX_INT32: Final = 2**31 - 1

# Labels, annotations and finalizers the Job API defines.
CONTROLLER_UID_LABEL: Final = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL: Final = "controller-uid"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL: Final = "job-name"
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
INDEX_FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-ignored-failure-count"
COMPLETION_INDEX_ENV: Final = "JOB_COMPLETION_INDEX"

# Condition types and reasons.
SUSPENDED: Final = "Suspended"
FAILURE_TARGET: Final = "FailureTarget"
FAILED: Final = "Failed"
SUCCESS_CRITERIA_MET: Final = "SuccessCriteriaMet"
COMPLETE: Final = "Complete"

INDEXED: Final = "Indexed"
POLICY_FAILED: Final = "Failed"


class OnExitCodes(msgspec.Struct, rename="camel", frozen=True):
    operator: str = "In"
    values: list[int] = []
    container_name: str | None = None


class OnPodCondition(msgspec.Struct, frozen=True):
    type: str = ""
    status: str = "True"


class PodFailurePolicyRule(msgspec.Struct, rename="camel", frozen=True):
    action: str = ""
    on_exit_codes: OnExitCodes | None = None
    on_pod_conditions: list[OnPodCondition] | None = None


class PodFailurePolicy(msgspec.Struct, frozen=True):
    rules: list[PodFailurePolicyRule] = []


class SuccessPolicyRule(msgspec.Struct, rename="camel", frozen=True):
    succeeded_indexes: str | None = None
    succeeded_count: int | None = None


class SuccessPolicy(msgspec.Struct, frozen=True):
    rules: list[SuccessPolicyRule] = []


class JobSpec(msgspec.Struct, rename="camel", frozen=True):
    parallelism: int | None = None
    completions: int | None = None
    active_deadline_seconds: int | None = None
    pod_failure_policy: PodFailurePolicy | None = None
    success_policy: SuccessPolicy | None = None
    backoff_limit: int | None = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    manual_selector: bool | None = None
    completion_mode: str | None = None
    suspend: bool | None = None
    pod_replacement_policy: str | None = None
    managed_by: str | None = None
    template: dict[str, Any] = {}


class Uncounted(msgspec.Struct, frozen=True):
    succeeded: list[str] | None = None
    failed: list[str] | None = None


class JobStatus(msgspec.Struct, rename="camel", frozen=True):
    active: int | None = None
    ready: int | None = None
    terminating: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    start_time: str | None = None
    completion_time: str | None = None
    completed_indexes: str | None = None
    failed_indexes: str | None = None
    uncounted_terminated_pods: Uncounted | None = None
    # Kept raw: conditions other writers added must survive our full-list merge patches.
    conditions: list[dict[str, Any]] | None = None


class JobView:
    """A managed Job's spec and status with the API's defaults resolved."""

    __slots__ = ("completed_indexes", "failed_indexes", "job", "spec", "status")

    def __init__(self, job: Job, spec: JobSpec, status: JobStatus) -> None:
        self.job = job
        self.spec = spec
        self.status = status
        # Parsed once: a decision asks about every finished pod's index, and the text of a
        # 10,000-pod Job's completed indexes is long until its indexes close into intervals.
        self.completed_indexes = Indexes.parse(status.completed_indexes, self.index_limit)
        self.failed_indexes = Indexes.parse(status.failed_indexes, self.index_limit)

    # -- spec -------------------------------------------------------------------------------

    @property
    def parallelism(self) -> int:
        return 1 if self.spec.parallelism is None else self.spec.parallelism

    @property
    def completions(self) -> int | None:
        if self.spec.completions is None and self.spec.parallelism is None:
            return 1
        return self.spec.completions

    @property
    def indexed(self) -> bool:
        return self.spec.completion_mode == INDEXED

    @property
    def index_limit(self) -> int:
        """Completions of an Indexed Job (the API requires them there)."""
        return self.completions or 0

    @property
    def suspended(self) -> bool:
        return self.spec.suspend is True

    @property
    def backoff_limit(self) -> int:
        if self.spec.backoff_limit is not None:
            return self.spec.backoff_limit
        return MAX_INT32 if self.spec.backoff_limit_per_index is not None else 6

    @property
    def per_index(self) -> bool:
        return self.indexed and self.spec.backoff_limit_per_index is not None

    @property
    def only_replace_failed(self) -> bool:
        """podReplacementPolicy Failed; a pod failure policy forces it even if unset."""
        return (
            self.spec.pod_replacement_policy == POLICY_FAILED
            or self.spec.pod_failure_policy is not None
        )

    @property
    def restart_policy(self) -> str:
        spec = self.template_spec
        policy = spec.get("restartPolicy")
        return policy if isinstance(policy, str) else "Always"

    @property
    def template_meta(self) -> dict[str, Any]:
        meta = self.spec.template.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def template_spec(self) -> dict[str, Any]:
        spec = self.spec.template.get("spec")
        return spec if isinstance(spec, dict) else {}

    # -- status -----------------------------------------------------------------------------

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list(self.status.conditions or ())

    def condition(self, type_: str) -> dict[str, Any] | None:
        for condition in self.status.conditions or ():
            if condition.get("type") == type_:
                return condition
        return None

    def condition_true(self, type_: str) -> dict[str, Any] | None:
        condition = self.condition(type_)
        return condition if condition is not None and condition.get("status") == "True" else None

    @property
    def finished(self) -> bool:
        return bool(self.condition_true(COMPLETE) or self.condition_true(FAILED))

    @property
    def uncounted_succeeded(self) -> list[str]:
        uncounted = self.status.uncounted_terminated_pods
        return list(uncounted.succeeded or ()) if uncounted else []

    @property
    def uncounted_failed(self) -> list[str]:
        uncounted = self.status.uncounted_terminated_pods
        return list(uncounted.failed or ()) if uncounted else []


class JobSpecError(ValueError):
    """A Job whose spec or status does not decode; the message names the field."""


def view_job(job: Job) -> JobView:
    try:
        spec = msgspec.convert(job.spec, JobSpec)
        status = msgspec.convert(job.status, JobStatus)
    except msgspec.ValidationError as exc:
        raise JobSpecError(str(exc)) from exc
    return JobView(job, spec, status)


def managed_by(obj: Job | JobSet) -> str | None:
    """`spec.managedBy` (a Job's or a JobSet's) without decoding the rest of the spec."""
    value = obj.spec.get("managedBy")
    return value if isinstance(value, str) else None
