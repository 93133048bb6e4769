"""Gang admission: Workloads and PodGroups admitted whole, placed by `daemon.placement`."""
