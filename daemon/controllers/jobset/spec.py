"""Typed views of a JobSet's `spec` and `status` (spec B0), decoded from the raw dicts the slim
`JobSet` keeps, and the label, annotation, condition and reason names the JobSet API defines.

The views apply the CRD and webhook defaults again (replicas 1, group `default`, strategy
`Recreate`, success policy `All`, ...) so that a JobSet read from a raw manifest or an old log
is interpreted the way the server would have stored it. Job templates stay raw dicts: child
Jobs are built from them verbatim.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from daemon.controllers.labels import (
    EXCLUSIVE_TOPOLOGY,
    JOB_KEY,
    JOBSET_NAME,
    JOBSET_PREFIX,
    NODE_SELECTOR_STRATEGY,
)
from events.objects import JobSet

__all__ = ["EXCLUSIVE_TOPOLOGY", "JOBSET_NAME", "JOB_KEY", "NODE_SELECTOR_STRATEGY"]

# -- names the API defines ----------------------------------------------------------------------

API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
PREFIX: Final = JOBSET_PREFIX
JOBSET_UID: Final = PREFIX + "jobset-uid"
REPLICATED_JOB_NAME: Final = PREFIX + "replicatedjob-name"
RESTART_ATTEMPT: Final = PREFIX + "restart-attempt"
JOB_RESTART_ATTEMPT: Final = PREFIX + "job-restart-attempt"
REPLICATED_JOB_REPLICAS: Final = PREFIX + "replicatedjob-replicas"
GLOBAL_REPLICAS: Final = PREFIX + "global-replicas"
JOB_INDEX: Final = PREFIX + "job-index"
JOB_GLOBAL_INDEX: Final = PREFIX + "job-global-index"
GROUP_NAME: Final = PREFIX + "group-name"
GROUP_REPLICAS: Final = PREFIX + "group-replicas"
JOB_GROUP_INDEX: Final = PREFIX + "job-group-index"
COORDINATOR: Final = PREFIX + "coordinator"
IN_PLACE_RESTART_ATTEMPT: Final = PREFIX + "in-place-restart-attempt"
DISABLE_IN_PLACE_RESTART: Final = PREFIX + "disable-in-place-restart"
NAMESPACED_JOB: Final = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT: Final = "alpha.jobset.sigs.k8s.io/no-schedule"
# The upstream controller's own name in `spec.managedBy` (reserved: never kbatchd's).
UPSTREAM_MANAGER: Final = "jobset.sigs.k8s.io/jobset-controller"
# ★ Beyond upstream: a volume claim template annotated with this ("true") gets a claim that is
# deleted as soon as the JobSet finishes, not when the JobSet object is deleted.
SCRATCH: Final = "kbatchd.dev/scratch"

# Condition types.
COMPLETED: Final = "Completed"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
RESTARTING: Final = "RestartingJobSet"
STARTUP_IN_PROGRESS: Final = "StartupPolicyInProgress"
STARTUP_COMPLETED: Final = "StartupPolicyCompleted"

# Strategies, actions, policies.
RECREATE: Final = "Recreate"
BLOCKING_RECREATE: Final = "BlockingRecreate"
IN_PLACE_RESTART: Final = "InPlaceRestart"
STRATEGIES: Final = (RECREATE, BLOCKING_RECREATE, IN_PLACE_RESTART)
FAIL_JOBSET: Final = "FailJobSet"
RESTART_JOBSET: Final = "RestartJobSet"
RESTART_JOBSET_IGNORE_MAX: Final = "RestartJobSetAndIgnoreMaxRestarts"
RESTART_JOB: Final = "RestartJob"
RESTART_JOB_IGNORE_MAX: Final = "RestartJobAndIgnoreMaxRestarts"
ACTIONS: Final = (
    FAIL_JOBSET,
    RESTART_JOBSET,
    RESTART_JOBSET_IGNORE_MAX,
    RESTART_JOB,
    RESTART_JOB_IGNORE_MAX,
)
JOB_FAILURE_REASONS: Final = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
ALL: Final = "All"
ANY: Final = "Any"
IN_ORDER: Final = "InOrder"
ANY_ORDER: Final = "AnyOrder"
READY: Final = "Ready"
COMPLETE: Final = "Complete"
DELETE: Final = "Delete"
RETAIN: Final = "Retain"
MAX_INT32: Final = 2**31 - 1


# -- spec ---------------------------------------------------------------------------------------


class DependsOn(msgspec.Struct, frozen=True):
    name: str = ""
    status: str = ""


class ReplicatedJob(msgspec.Struct, rename="camel", frozen=True):
    name: str = ""
    group_name: str = "default"
    replicas: int = 1
    depends_on: list[DependsOn] | None = None
    # The Job template: `metadata` and `spec`, raw.
    template: dict[str, Any] = {}

    @property
    def job_spec(self) -> dict[str, Any]:
        spec = self.template.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def job_meta(self) -> dict[str, Any]:
        meta = self.template.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def pod_template(self) -> dict[str, Any]:
        template = self.job_spec.get("template")
        return template if isinstance(template, dict) else {}

    @property
    def pod_spec(self) -> dict[str, Any]:
        spec = self.pod_template.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def pods_per_job(self) -> int:
        """min(parallelism, completions) with the Job defaults, as upstream counts `ready`."""
        spec = self.job_spec
        parallelism = spec.get("parallelism")
        count = parallelism if isinstance(parallelism, int) else 1
        completions = spec.get("completions")
        if isinstance(completions, int) and completions < count:
            count = completions
        return count


class FailurePolicyRule(msgspec.Struct, rename="camel", frozen=True):
    name: str = ""
    action: str = ""
    on_job_failure_reasons: list[str] | None = None
    on_job_failure_message_patterns: list[str] | None = None
    target_replicated_jobs: list[str] | None = None


class FailurePolicy(msgspec.Struct, rename="camel", frozen=True):
    max_restarts: int = 0
    restart_strategy: str = RECREATE
    rules: list[FailurePolicyRule] | None = None


class SuccessPolicy(msgspec.Struct, rename="camel", frozen=True):
    operator: str = ALL
    target_replicated_jobs: list[str] | None = None


class StartupPolicy(msgspec.Struct, rename="camel", frozen=True):
    startup_policy_order: str = ANY_ORDER


class Network(msgspec.Struct, rename="camel", frozen=True):
    # Not "enableDnsHostnames", which is what rename="camel" would make of it.
    enable_dns_hostnames: bool | None = msgspec.field(default=None, name="enableDNSHostnames")
    subdomain: str | None = None
    publish_not_ready_addresses: bool | None = None


class RetentionPolicy(msgspec.Struct, rename="camel", frozen=True):
    when_deleted: str = DELETE


class VolumeClaimPolicy(msgspec.Struct, rename="camel", frozen=True):
    # PersistentVolumeClaim objects (metadata and spec), raw.
    templates: list[dict[str, Any]] = []
    retention_policy: RetentionPolicy = RetentionPolicy()


class Coordinator(msgspec.Struct, rename="camel", frozen=True):
    replicated_job: str = ""
    job_index: int = 0
    pod_index: int = 0


class JobSetSpec(msgspec.Struct, rename="camel", frozen=True):
    replicated_jobs: list[ReplicatedJob] = []
    network: Network | None = None
    success_policy: SuccessPolicy = SuccessPolicy()
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy = StartupPolicy()
    suspend: bool | None = None
    managed_by: str | None = None
    volume_claim_policies: list[VolumeClaimPolicy] | None = None
    coordinator: Coordinator | None = None
    ttl_seconds_after_finished: int | None = None


# -- status -------------------------------------------------------------------------------------


class JobSetStatus(msgspec.Struct, rename="camel", frozen=True):
    restarts: int = 0
    restarts_count_towards_max: int = 0
    terminal_state: str | None = None
    previous_in_place_restart_attempt: int | None = None
    current_in_place_restart_attempt: int | None = None
    # Kept raw: written back whole by merge patches, other writers' entries must survive.
    conditions: list[dict[str, Any]] | None = None
    replicated_jobs_status: list[dict[str, Any]] | None = None


class JobSetSpecError(ValueError):
    """A JobSet whose spec or status does not decode; the message names the field."""


class JobSetView:
    """A JobSet's spec and status with the defaults resolved."""

    __slots__ = ("jobset", "spec", "status")

    def __init__(self, jobset: JobSet, spec: JobSetSpec, status: JobSetStatus) -> None:
        self.jobset = jobset
        self.spec = spec
        self.status = status

    @property
    def name(self) -> str:
        return self.jobset.name

    @property
    def namespace(self) -> str:
        return self.jobset.namespace

    def owner_reference(self) -> dict[str, Any]:
        """The controller reference that makes an object the JobSet's: the garbage collector
        removes it with the JobSet."""
        return {
            "apiVersion": API_VERSION,
            "kind": "JobSet",
            "name": self.name,
            "uid": self.jobset.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    @property
    def suspended(self) -> bool:
        return self.spec.suspend is True

    @property
    def strategy(self) -> str:
        policy = self.spec.failure_policy
        return policy.restart_strategy if policy is not None else RECREATE

    @property
    def in_order(self) -> bool:
        return self.spec.startup_policy.startup_policy_order == IN_ORDER

    @property
    def dns_hostnames(self) -> bool:
        """`network.enableDNSHostnames`, which the webhook defaults to true."""
        network = self.spec.network
        return network is None or network.enable_dns_hostnames is not False

    @property
    def publish_not_ready_addresses(self) -> bool:
        """`network.publishNotReadyAddresses`, which the webhook defaults to true."""
        network = self.spec.network
        return network is None or network.publish_not_ready_addresses is not False

    @property
    def subdomain(self) -> str:
        network = self.spec.network
        if network is not None and network.subdomain:
            return network.subdomain
        return self.name

    @property
    def total_replicas(self) -> int:
        return sum(rj.replicas for rj in self.spec.replicated_jobs)

    def replicated_job(self, name: str) -> ReplicatedJob | None:
        for rj in self.spec.replicated_jobs:
            if rj.name == name:
                return rj
        return None

    def condition(self, type_: str) -> dict[str, Any] | None:
        for condition in self.status.conditions or ():
            if condition.get("type") == type_:
                return condition
        return None

    def condition_true(self, type_: str) -> bool:
        condition = self.condition(type_)
        return condition is not None and condition.get("status") == "True"

    @property
    def finished(self) -> bool:
        return self.condition_true(COMPLETED) or self.condition_true(FAILED)

    def job_restarts(self, rj: str) -> list[int]:
        """`replicatedJobsStatus[rj].jobRestarts` (RestartJob), one count per Job index."""
        return _int_list(self._rj_status(rj).get("jobRestarts"))

    def job_restarts_towards_max(self, rj: str) -> list[int]:
        return _int_list(self._rj_status(rj).get("jobRestartsCountTowardsMax"))

    def _rj_status(self, rj: str) -> dict[str, Any]:
        for entry in self.status.replicated_jobs_status or ():
            if entry.get("name") == rj:
                return entry
        return {}


def _int_list(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, int) else 0 for v in value]


def view_jobset(jobset: JobSet) -> JobSetView:
    try:
        spec = msgspec.convert(jobset.spec, JobSetSpec)
        status = msgspec.convert(jobset.status, JobSetStatus)
    except msgspec.ValidationError as exc:
        raise JobSetSpecError(str(exc)) from exc
    templates = [webhook_job_template(rj.template) for rj in spec.replicated_jobs]
    if any(t is not rj.template for t, rj in zip(templates, spec.replicated_jobs, strict=True)):
        replicated = [
            msgspec.structs.replace(rj, template=t)
            for t, rj in zip(templates, spec.replicated_jobs, strict=True)
        ]
        spec = msgspec.structs.replace(spec, replicated_jobs=replicated)
    return JobSetView(jobset, spec, status)


def webhook_job_template(template: dict[str, Any]) -> dict[str, Any]:
    """A replicatedJob's Job template with the defaults JobSet's mutating webhook gives it on
    create: an Indexed Job, pods restarted OnFailure. A cluster that serves the JobSet CRDs
    without that webhook stores the template as written, and child Jobs must still be what
    the webhook would have made of it. The template itself when nothing is missing."""
    spec = template.get("spec", {})
    if not isinstance(spec, dict):
        return template
    pod = spec.get("template")
    pod_spec = pod.get("spec") if isinstance(pod, dict) else None
    needs_pod = isinstance(pod_spec, dict) and "restartPolicy" not in pod_spec
    if "completionMode" in spec and not needs_pod:
        return template
    spec = {"completionMode": "Indexed", **spec}
    if needs_pod and isinstance(pod, dict) and isinstance(pod_spec, dict):
        spec["template"] = {**pod, "spec": {"restartPolicy": "OnFailure", **pod_spec}}
    return {**template, "spec": spec}


def job_name(jobset: str, replicated_job: str, index: int) -> str:
    """upstream `placement.GenJobName`: ``<jobset>-<replicatedJob>-<jobIndex>``."""
    return f"{jobset}-{replicated_job}-{index}"


def pvc_name(jobset: str, template: str) -> str:
    """upstream `GeneratePVCName`: ``<templateName>-<jobsetName>``."""
    return f"{template}-{jobset}"


def template_name(template: dict[str, Any]) -> str:
    meta = template.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def is_scratch(template: dict[str, Any]) -> bool:
    meta = template.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    return isinstance(notes, dict) and notes.get(SCRATCH) == "true"
