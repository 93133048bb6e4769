"""The API transport: the environment's proxy is read once, not per request, and a request
carries the client's authentication, the content type, the query and the body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from daemon.kube.api import KubeApi, proxy_from_environment

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


# -- what a request carries ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_request_carries_the_kubeconfig_token_headers_query_and_body(
    tmp_path: Path,
) -> None:
    """Against a plain HTTP server on loopback that records what arrives: the client's own
    authentication (the kubeconfig's bearer token), the content type asked for, the query and
    the body as JSON."""
    seen: list[tuple[str, str, dict[str, str], dict[str, str], bytes]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(
            (
                request.method,
                request.path,
                dict(request.headers),
                dict(request.query),
                await request.read(),
            )
        )
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "secret-token"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        body = {"apiVersion": "v1", "kind": "Binding", "target": {"name": "n1"}}
        async with KubeApi.connect("c", str(kubeconfig), None) as api:
            answer = await api.request(
                "PATCH",
                "/api/v1/namespaces/default/pods/p",
                query={"dryRun": "All"},
                body=body,
                content_type="application/merge-patch+json",
            )
    finally:
        await runner.cleanup()
    assert answer.status == 201
    [(method, path, headers, query, sent)] = seen
    assert (method, path, query) == (
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        {"dryRun": "All"},
    )
    assert headers["Authorization"] == "Bearer secret-token"
    assert headers["Content-Type"] == "application/merge-patch+json"
    assert headers["Accept"] == "application/json"
    assert json.loads(sent) == body
