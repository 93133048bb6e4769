"""The JobSet controller: child Jobs, dependsOn, policies, volume claims, in-place restart."""
