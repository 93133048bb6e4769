"""The API transport's set-up: the environment's proxy is read once, not per request."""

from __future__ import annotations

import pytest

from daemon.kube.api import proxy_from_environment

PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
)


@pytest.mark.parametrize(
    ("environment", "server", "expected"),
    [
        ({}, "https://k8s.example:6443", None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "https://k8s.example:6443", "http://proxy:3128"),
        ({"HTTP_PROXY": "http://proxy:3128"}, "https://k8s.example:6443", None),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://k8s.example:8080", "http://proxy:3128"),
        (
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "127.0.0.1,.internal"},
            "https://127.0.0.1:6443",
            None,
        ),
        (
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "127.0.0.1,.internal"},
            "https://api.cluster.internal",
            None,
        ),
        ({"HTTPS_PROXY": "http://proxy:3128"}, None, None),
    ],
)
def test_proxy_from_environment(
    monkeypatch: pytest.MonkeyPatch,
    environment: dict[str, str],
    server: str | None,
    expected: str | None,
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert proxy_from_environment(server) == expected
