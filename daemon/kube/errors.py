"""Errors of the cluster layer that callers name without loading the Kubernetes client."""

from __future__ import annotations


class ConfigError(Exception):
    """No usable cluster configuration (kubeconfig or in-cluster): reported as an error in
    kbatchd's own settings file is (one line, exit code 2)."""
