"""What the fold does for JobSets beyond storing them: wake a JobSet whose in-place restart
barrier may have moved.

The JobSet reconciler drives the in-place restart barrier (spec B5.2) from its pods' attempt
annotations and container restart counts. Pods are controlled by child Jobs, so the fold's
owner rule dirties only the Job; a pod of a JobSet with `restartStrategy: InPlaceRestart`
(found by the `jobset.sigs.k8s.io/jobset-name` label, as upstream indexes them) also dirties
its JobSet. Cost: one label lookup per pod event, and one JobSet lookup for pods that have the
label.
"""

from __future__ import annotations

from typing import Final

from daemon.controllers.jobset.spec import IN_PLACE_RESTART, JOBSET_NAME
from events.hooks import Change, Dirty, FoldHooks
from events.objects import Pod
from events.state import State


def dirty_in_place(state: State, cluster: str, pod: Pod, dirty: set[str]) -> None:
    name = pod.labels.get(JOBSET_NAME)
    if name is None:
        return
    key = f"{cluster}/{pod.namespace}/{name}"
    jobset = state.jobsets.get(key)
    if jobset is None:
        return
    policy = jobset.spec.get("failurePolicy")
    if isinstance(policy, dict) and policy.get("restartStrategy") == IN_PLACE_RESTART:
        dirty.add(f"JobSet/{key}")


def _pod_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    if dirty is not None:
        dirty_in_place(state, change.cluster, change.obj, dirty)


FOLD: Final = FoldHooks(observed={"Pod": _pod_observed})
