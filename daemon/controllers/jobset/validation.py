"""The JobSet webhook's create rules (spec B0–B5, C7.6, C9.5, C10.7), as pure functions of the
decoded spec.

Two callers: the simulated API server rejects a JobSet that breaks them with a 422 (as the
upstream validating webhook does), and the JobSet reconciler refuses one that reached it anyway
(a real cluster without the webhook lets it through). Beyond upstream, a `dependsOn` that names
its own replicatedJob is rejected: upstream's webhook lets it pass and the replicatedJob then
waits forever (spec B1). Gated features are treated as enabled, since kbatchd implements them
(`InPlaceRestart`, `RestartJob`). Existing-claim checks need the cluster and live with the
server (`daemon.sim.jobset_validation`).
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from daemon.controllers.jobset.spec import (
    ACTIONS,
    ALL,
    ANY,
    COMPLETE,
    DELETE,
    IN_ORDER,
    IN_PLACE_RESTART,
    JOB_FAILURE_REASONS,
    MAX_INT32,
    READY,
    RESTART_JOB,
    RESTART_JOB_IGNORE_MAX,
    RETAIN,
    STRATEGIES,
    JobSetSpec,
    ReplicatedJob,
    is_scratch,
    job_name,
    pvc_name,
    template_name,
)

Problem = tuple[str, str]  # (field path, what is wrong with it)

MAX_DEPENDS_ON: Final = 5
MAX_CLAIM_POLICIES: Final = 50
MAX_CLAIM_TEMPLATES: Final = 50
MAX_RESTART_JOB_REPLICAS: Final = 1024
_NAME_LENGTH: Final = 63
_RANDOM_SUFFIX: Final = 5
_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RULE_NAME: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
MANAGED_BY: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9_.~!$&'()*+,;=:@/%]+$"
)


def validate_raw(name: str, spec: dict[str, Any]) -> list[Problem]:
    """Every problem with a JobSet named `name` whose raw spec is `spec`."""
    try:
        decoded = msgspec.convert(spec, JobSetSpec)
    except msgspec.ValidationError as exc:
        return [("spec", str(exc))]
    return validate(name, decoded)


def validate(name: str, spec: JobSetSpec) -> list[Problem]:
    problems = _replicated_jobs(name, spec)
    problems += _depends_on(spec)
    problems += _failure_policy(spec)
    problems += _success_policy(spec)
    problems += _volume_claims(name, spec)
    problems += _coordinator(name, spec)
    if spec.managed_by is not None:
        if not MANAGED_BY.match(spec.managed_by):
            problems.append(
                ("spec.managedBy", 'must be a domain-prefixed path (such as "acme.io/foo")')
            )
        elif len(spec.managed_by) > _NAME_LENGTH:
            problems.append(("spec.managedBy", "may not be more than 63 bytes"))
    return problems


def _replicated_jobs(name: str, spec: JobSetSpec) -> list[Problem]:
    problems: list[Problem] = []
    if not spec.replicated_jobs:
        problems.append(("spec.replicatedJobs", "Required value: at least one replicatedJob"))
    seen: set[str] = set()
    for i, rj in enumerate(spec.replicated_jobs):
        path = f"spec.replicatedJobs[{i}]"
        if not _LABEL.match(rj.name):
            problems.append((f"{path}.name", f"{rj.name!r} is not a valid RFC 1123 label"))
        if rj.name in seen:
            problems.append((f"{path}.name", f"Duplicate value: {rj.name!r}"))
        seen.add(rj.name)
        if rj.replicas < 0:
            problems.append((f"{path}.replicas", "must be greater than or equal to 0"))
        longest = job_name(name, rj.name, max(rj.replicas - 1, 0))
        if len(longest) > _NAME_LENGTH:
            problems.append(
                (
                    f"{path}.name",
                    f"JobSet name and replicatedJob name make the Job name {longest!r} longer "
                    f"than {_NAME_LENGTH} characters",
                )
            )
        elif _longest_pod_name(longest, rj) > _NAME_LENGTH:
            problems.append(
                (
                    f"{path}.name",
                    f"JobSet name and replicatedJob name make pod names of Job {longest!r} "
                    f"longer than {_NAME_LENGTH} characters",
                )
            )
    return problems


def _longest_pod_name(job: str, rj: ReplicatedJob) -> int:
    completions = rj.job_spec.get("completions")
    last = max(completions - 1, 0) if isinstance(completions, int) else 0
    return len(job) + 1 + len(str(last)) + 1 + _RANDOM_SUFFIX


def _depends_on(spec: JobSetSpec) -> list[Problem]:
    problems: list[Problem] = []
    earlier: set[str] = set()
    for i, rj in enumerate(spec.replicated_jobs):
        path = f"spec.replicatedJobs[{i}].dependsOn"
        deps = rj.depends_on or []
        if deps and i == 0:
            problems.append((path, "the first replicatedJob cannot have dependsOn"))
        if len(deps) > MAX_DEPENDS_ON:
            problems.append((path, f"Too many: {len(deps)}: must have at most 5 items"))
        if deps and spec.startup_policy.startup_policy_order == IN_ORDER:
            problems.append((path, "dependsOn cannot be set together with startupPolicy InOrder"))
        names: set[str] = set()
        for j, dep in enumerate(deps):
            if dep.status not in (READY, COMPLETE):
                problems.append(
                    (
                        f"{path}[{j}].status",
                        f'Unsupported value: "{dep.status}": supported values: "Ready", "Complete"',
                    )
                )
            if dep.name in names:
                problems.append((f"{path}[{j}].name", f"Duplicate value: {dep.name!r}"))
            names.add(dep.name)
            if dep.name == rj.name:
                problems.append(
                    (
                        f"{path}[{j}].name",
                        f"replicatedJob: {rj.name} cannot depend on itself",
                    )
                )
            elif dep.name not in earlier:
                problems.append(
                    (
                        f"{path}[{j}].name",
                        f"replicatedJob: {rj.name} cannot depend on replicatedJob: {dep.name}",
                    )
                )
        earlier.add(rj.name)
    return problems


def _failure_policy(spec: JobSetSpec) -> list[Problem]:
    policy = spec.failure_policy
    if policy is None:
        return []
    problems: list[Problem] = []
    if policy.max_restarts < 0:
        problems.append(("spec.failurePolicy.maxRestarts", "must be greater than or equal to 0"))
    if policy.restart_strategy not in STRATEGIES:
        problems.append(
            (
                "spec.failurePolicy.restartStrategy",
                f"Unsupported value: {policy.restart_strategy!r}",
            )
        )
    rj_names = {rj.name for rj in spec.replicated_jobs}
    names: set[str] = set()
    restart_job = False
    for i, rule in enumerate(policy.rules or ()):
        path = f"spec.failurePolicy.rules[{i}]"
        if not 1 <= len(rule.name) <= 128 or not _RULE_NAME.match(rule.name):
            problems.append(
                (
                    f"{path}.name",
                    f"{rule.name!r} must be 1 to 128 characters and match {_RULE_NAME.pattern}",
                )
            )
        if rule.name in names:
            problems.append((f"{path}.name", f"Duplicate value: {rule.name!r}"))
        names.add(rule.name)
        if rule.action not in ACTIONS:
            problems.append((f"{path}.action", f"Unsupported value: {rule.action!r}"))
        restart_job = restart_job or rule.action in (RESTART_JOB, RESTART_JOB_IGNORE_MAX)
        for target in rule.target_replicated_jobs or ():
            if target not in rj_names:
                problems.append(
                    (
                        f"{path}.targetReplicatedJobs",
                        f"replicatedJob {target!r} does not exist",
                    )
                )
        for reason in rule.on_job_failure_reasons or ():
            if reason not in JOB_FAILURE_REASONS:
                problems.append(
                    (
                        f"{path}.onJobFailureReasons",
                        f"Unsupported value: {reason!r}: supported values: "
                        + ", ".join(JOB_FAILURE_REASONS),
                    )
                )
    if restart_job:
        for i, rj in enumerate(spec.replicated_jobs):
            if rj.replicas > MAX_RESTART_JOB_REPLICAS:
                problems.append(
                    (
                        f"spec.replicatedJobs[{i}].replicas",
                        f"must be at most {MAX_RESTART_JOB_REPLICAS} with a RestartJob "
                        "failure policy action",
                    )
                )
    if policy.restart_strategy == IN_PLACE_RESTART:
        problems += _in_place(spec)
    return problems


def _in_place(spec: JobSetSpec) -> list[Problem]:
    """Every replicatedJob must never fail or replace pods on its own (spec B5.2)."""
    problems: list[Problem] = []
    for i, rj in enumerate(spec.replicated_jobs):
        path = f"spec.replicatedJobs[{i}].template.spec"
        job = rj.job_spec
        if job.get("backoffLimit") != MAX_INT32:
            problems.append(
                (f"{path}.backoffLimit", f"must be {MAX_INT32} with restartStrategy InPlaceRestart")
            )
        if job.get("podReplacementPolicy") != "Failed":
            problems.append(
                (
                    f"{path}.podReplacementPolicy",
                    "must be Failed with restartStrategy InPlaceRestart",
                )
            )
        completions, parallelism = job.get("completions"), job.get("parallelism")
        if completions is None or parallelism is None or completions != parallelism:
            problems.append(
                (
                    f"{path}.completions",
                    "completions and parallelism must both be set and equal with "
                    "restartStrategy InPlaceRestart",
                )
            )
    return problems


def _success_policy(spec: JobSetSpec) -> list[Problem]:
    policy = spec.success_policy
    problems: list[Problem] = []
    if policy.operator not in (ALL, ANY):
        problems.append(("spec.successPolicy.operator", f"Unsupported value: {policy.operator!r}"))
    rj_names = {rj.name for rj in spec.replicated_jobs}
    for target in policy.target_replicated_jobs or ():
        if target not in rj_names:
            problems.append(
                (
                    "spec.successPolicy.targetReplicatedJobs",
                    f"replicatedJob {target!r} does not exist",
                )
            )
    return problems


def _mounts(rj: ReplicatedJob) -> set[str]:
    names: set[str] = set()
    for field in ("containers", "initContainers"):
        for container in rj.pod_spec.get(field) or ():
            if isinstance(container, dict):
                for mount in container.get("volumeMounts") or ():
                    if isinstance(mount, dict) and isinstance(mount.get("name"), str):
                        names.add(mount["name"])
    return names


def _volumes(rj: ReplicatedJob) -> set[str]:
    return {
        v["name"]
        for v in rj.pod_spec.get("volumes") or ()
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    }


def _volume_claims(name: str, spec: JobSetSpec) -> list[Problem]:
    policies = spec.volume_claim_policies or []
    problems: list[Problem] = []
    if len(policies) > MAX_CLAIM_POLICIES:
        problems.append(("spec.volumeClaimPolicies", f"must have at most {MAX_CLAIM_POLICIES}"))
    mounted = set().union(*(_mounts(rj) for rj in spec.replicated_jobs))
    declared = set().union(*(_volumes(rj) for rj in spec.replicated_jobs))
    seen: set[str] = set()
    for i, policy in enumerate(policies):
        path = f"spec.volumeClaimPolicies[{i}]"
        when = policy.retention_policy.when_deleted
        if when not in (DELETE, RETAIN):
            problems.append((f"{path}.retentionPolicy.whenDeleted", f"Unsupported value: {when!r}"))
        if len(policy.templates) > MAX_CLAIM_TEMPLATES:
            problems.append((f"{path}.templates", f"must have at most {MAX_CLAIM_TEMPLATES}"))
        for j, template in enumerate(policy.templates):
            tpath = f"{path}.templates[{j}].metadata.name"
            tname = template_name(template)
            if not tname or not _SUBDOMAIN.match(tname):
                problems.append((tpath, f"{tname!r} is not a valid RFC 1123 subdomain"))
            elif len(pvc_name(name, tname)) > _NAME_LENGTH:
                problems.append(
                    (tpath, f"claim name {pvc_name(name, tname)!r} is longer than 63 characters")
                )
            if tname in seen:
                problems.append((tpath, f"Duplicate value: {tname!r}"))
            seen.add(tname)
            if tname not in mounted:
                problems.append(
                    (tpath, f"no container or initContainer mounts a volume named {tname!r}")
                )
            if tname in declared:
                problems.append(
                    (tpath, f"a replicatedJob already declares a volume named {tname!r}")
                )
            meta = template.get("metadata")
            if isinstance(meta, dict) and meta.get("namespace"):
                problems.append((f"{path}.templates[{j}].metadata.namespace", "must not be set"))
            if is_scratch(template) and when == RETAIN:
                problems.append(
                    (
                        f"{path}.retentionPolicy.whenDeleted",
                        "a kbatchd.dev/scratch claim is deleted when the JobSet finishes; "
                        "it cannot be retained",
                    )
                )
    return problems


def _coordinator(name: str, spec: JobSetSpec) -> list[Problem]:
    coordinator = spec.coordinator
    if coordinator is None:
        return []
    rj = next((r for r in spec.replicated_jobs if r.name == coordinator.replicated_job), None)
    if rj is None:
        return [
            (
                "spec.coordinator.replicatedJob",
                f"replicatedJob {coordinator.replicated_job!r} does not exist",
            )
        ]
    problems: list[Problem] = []
    if not 0 <= coordinator.job_index < rj.replicas:
        problems.append(("spec.coordinator.jobIndex", "must be a valid job index"))
    job = rj.job_spec
    completions = job.get("completions")
    if job.get("completionMode") != "Indexed" or not isinstance(completions, int):
        problems.append(
            (
                "spec.coordinator.replicatedJob",
                "the coordinator's replicatedJob must be Indexed with completions set",
            )
        )
    elif not 0 <= coordinator.pod_index < completions:
        problems.append(("spec.coordinator.podIndex", "must be a valid pod index"))
    subdomain = (spec.network.subdomain if spec.network else None) or name
    endpoint = (
        f"{name}-{coordinator.replicated_job}-{coordinator.job_index}-"
        f"{coordinator.pod_index}.{subdomain}"
    )
    if len(endpoint) > _NAME_LENGTH or not _LABEL_VALUE.match(endpoint):
        problems.append(("spec.coordinator", f"endpoint {endpoint!r} is not a valid label value"))
    return problems
