"""Several worker clusters: a workload submitted to the manager cluster runs in exactly one
worker, and a preemption for it evicts in at most one (`plan`); the workers that hold a copy
while it waits come from its dispatcher (`dispatch`)."""
