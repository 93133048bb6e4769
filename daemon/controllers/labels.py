"""Label and annotation keys more than one controller reads: the JobSet API's, which the Job
controller reads too (it shapes the pods of a JobSet's child Jobs for exclusive placement,
`job.exclusive`, as upstream's pod webhook does), and kbatchd's gang annotations, which a
JobSet writes on the Workload it makes and gang admission reads. Here so that no controller
imports another for them."""

from __future__ import annotations

from typing import Final

JOBSET_PREFIX: Final = "jobset.sigs.k8s.io/"
JOBSET_NAME: Final = JOBSET_PREFIX + "jobset-name"
JOB_KEY: Final = JOBSET_PREFIX + "job-key"
EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY: Final = "alpha.jobset.sigs.k8s.io/node-selector"

# kbatchd's gang annotations. On a Workload: the pod group template whose groups are admitted
# first (default: the one named ``leader``). On a JobSet: its gang (`jobset.gangs`).
LEADER_TEMPLATE: Final = "kbatchd.dev/leader-template"
DEFAULT_LEADER_TEMPLATE: Final = "leader"
GANG: Final = "kbatchd.dev/gang"
GANG_TOPOLOGY: Final = "kbatchd.dev/gang-topology"
GANG_JOB_TOPOLOGY: Final = "kbatchd.dev/gang-job-topology"
