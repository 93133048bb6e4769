"""The API transport: the environment's proxy is read once, not per request, and a request
carries the client's authentication, the content type, the query and the body."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import structlog.testing
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from daemon.kube.api import (
    BoundedExecProvider,
    ConfigError,
    KubeApi,
    WatchHttpError,
    load_configuration,
)
from daemon.kube.session import endpoint, proxy_from_environment

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


@asynccontextmanager
async def answering(
    handler: Callable[[web.Request], Awaitable[web.Response]],
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[int]:
    """An HTTP server on loopback (HTTPS with `tls`) answering every request with `handler`;
    its port."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def write_kubeconfig(path: Path, cluster: dict[str, object], token: str = "t") -> str:
    """A kubeconfig of one cluster entry (server, proxy-url, TLS settings) and a bearer
    token; its path."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


# -- what a request carries ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("prefix", "query", "proxied"),
    [
        ("", {"dryRun": "All"}, False),
        ("", {}, False),
        ("/k8s/clusters/c-1", {"dryRun": "All", "fieldManager": "a b/c"}, False),
        ("/k8s/clusters/c-1/", {}, False),
        ("", {"dryRun": "All"}, True),
        ("/k8s/clusters/c-1", {}, True),
    ],
    ids=["query", "no-query", "server-path-query", "server-path", "proxy-query", "proxy-path"],
)
async def test_a_request_carries_the_kubeconfig_token_headers_query_and_body(
    tmp_path: Path, prefix: str, query: dict[str, str], proxied: bool
) -> None:
    """Against a plain HTTP server on loopback that records what arrives: the client's own
    authentication (the kubeconfig's bearer token), the content type asked for, the query and
    the body as JSON, at the server URL's path (a cluster behind a proxy) and the request's.
    With the kubeconfig's `proxy-url` (the same server, acting as the proxy) the request goes
    through aiohttp, in the absolute form a proxy is sent."""
    seen: list[tuple[str, str, dict[str, str], dict[str, str], bytes]] = []
    forms: list[bool] = []

    async def record(request: web.Request) -> web.Response:
        forms.append(request.raw_path.startswith("http://"))
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

    async with answering(record) as port:
        cluster = {"server": f"http://127.0.0.1:{port}{prefix}"}
        if proxied:
            cluster["proxy-url"] = f"http://127.0.0.1:{port}"
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster, "secret-token")
        body = {"apiVersion": "v1", "kind": "Binding", "target": {"name": "n1"}}
        async with KubeApi.connect("c", kubeconfig, None) as api:
            answer = await api.request(
                "PATCH",
                "/api/v1/namespaces/default/pods/p",
                query=query,
                body=body,
                content_type="application/merge-patch+json",
            )
    assert answer.status == 201
    [(method, path, headers, received, sent)] = seen
    assert (method, path, received) == (
        "PATCH",
        prefix.rstrip("/") + "/api/v1/namespaces/default/pods/p",
        query,
    )
    assert headers["Authorization"] == "Bearer secret-token"
    assert headers["Content-Type"] == "application/merge-patch+json"
    assert headers["Accept"] == "application/json"
    assert json.loads(sent) == body
    assert forms == [proxied]


@pytest.mark.anyio
async def test_a_path_is_quoted_for_the_request_line(tmp_path: Path) -> None:
    """API names never need quoting; anything else must not break the request line."""
    paths: list[str] = []

    async def record(request: web.Request) -> web.Response:
        paths.append(request.raw_path)
        return web.json_response({}, status=200)

    async with answering(record) as port:
        server = f"http://127.0.0.1:{port}"
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"server": server})
        async with KubeApi.connect("c", kubeconfig, None) as api:
            answer = await api.request("GET", "/api/v1/namespaces/default/pods/a b%ü")
    assert answer.status == 200
    assert paths == ["/api/v1/namespaces/default/pods/a%20b%25%C3%BC"]


_BASIC = "Basic " + base64.b64encode(b"me:p@ss").decode()


@pytest.mark.parametrize(
    ("host", "proxy", "expected"),
    [
        ("https://10.0.0.1:6443", None, ("10.0.0.1", 6443, True, None, {})),
        ("https://api.cluster.internal", None, ("api.cluster.internal", 443, True, None, {})),
        ("http://[::1]:8080/k8s/clusters/c-1", None, ("::1", 8080, False, None, {})),
        (
            "https://10.0.0.1:6443",
            "http://proxy:3128",
            ("10.0.0.1", 6443, True, "http://proxy:3128", {}),
        ),
        (
            "http://10.0.0.1:8080",
            "http://me:p%40ss@proxy",
            ("10.0.0.1", 8080, False, "http://proxy", {"Proxy-Authorization": _BASIC}),
        ),
    ],
    ids=["https", "default-port", "ipv6-with-path", "tunnel", "forward-with-credentials"],
)
def test_the_endpoint_follows_the_configuration(
    host: str, proxy: str | None, expected: tuple[str, int, bool, str | None, dict[str, str]]
) -> None:
    """TLS for an https:// server; a proxy without the credentials of its URL, which it is
    sent as its Basic authorization instead (whether a request tunnels or goes in absolute
    form is aiohttp's to decide, by the server's scheme: tested against servers below)."""
    configuration = Configuration(host=host)
    configuration.proxy = proxy
    configuration.connection_pool_maxsize = 7
    server = endpoint(configuration)
    proxy_url = None if server.proxy is None else str(server.proxy)
    assert (
        server.host,
        server.port,
        server.tls is not None,
        proxy_url,
        server.proxy_headers,
    ) == expected
    assert server.limit == 7


@pytest.mark.parametrize(
    ("host", "proxy", "fragment"),
    [
        ("ftp://10.0.0.1", None, "the API server URL 'ftp://10.0.0.1' is not an http"),
        ("https://10.0.0.1", "https://me:secret@proxy:3128", "the proxy URL https://me@proxy:3128"),
        ("https://10.0.0.1", "socks5://proxy:1080", "the proxy URL socks5://proxy:1080 is not an"),
    ],
)
def test_a_url_that_cannot_be_used_is_a_configuration_error_without_its_password(
    host: str, proxy: str | None, fragment: str
) -> None:
    configuration = Configuration(host=host)
    configuration.proxy = proxy
    with pytest.raises(ConfigError) as caught:
        endpoint(configuration)
    assert fragment in str(caught.value)
    assert "secret" not in str(caught.value)


_NOT_PEM = "bm90IGEgY2VydAo="  # base64 of "not a cert"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("before", "after", "detail"),
    [
        pytest.param(
            "https://127.0.0.1:6443",
            "ftp://127.0.0.1:6443",
            "the API server URL 'ftp://127.0.0.1:6443' is not an http:// or https:// URL",
            id="not-http",
        ),
        pytest.param(
            "{token: t}",
            f"{{client-certificate-data: {_NOT_PEM}, client-key-data: {_NOT_PEM}}}",
            "its TLS certificates or key cannot be loaded: [SSL]",
            id="client-certificate-not-pem",
        ),
        pytest.param(
            "server: ",
            f"certificate-authority-data: {_NOT_PEM}, server: ",
            "its TLS certificates or key cannot be loaded: ",
            id="ca-not-pem",
        ),
        pytest.param(
            '"https://127.0.0.1:6443"',
            '"http://[::zz]:x"',
            "the API server URL 'http://[::zz]:x' is not a URL (",
            id="not-a-url",
        ),
        pytest.param(
            '"https://127.0.0.1:6443"',
            '"http://[::zz]:80"',
            "the API server URL 'http://[::zz]:80' has an invalid IPv6 address '::zz'",
            id="not-an-ipv6-address",
        ),
        pytest.param(
            '"https://127.0.0.1:6443"',
            '"https://a b:6443"',
            "the API server URL 'https://a b:6443' has an invalid host 'a b'",
            id="a-space-in-the-host",
        ),
        pytest.param(
            '"https://127.0.0.1:6443"',
            '"https://127.0.0.1:99999"',
            "the API server URL 'https://127.0.0.1:99999' is not a URL (",
            id="port-out-of-range",
        ),
        pytest.param(
            '"https://127.0.0.1:6443"',
            '"https://127.0.0.1:6443", proxy-url: "http://me:secret@[::zz]:x"',
            "the proxy URL is not a URL (",
            id="proxy-not-a-url",
        ),
    ],
)
async def test_a_kubeconfig_whose_server_or_certificates_cannot_be_used_is_one_line(
    tmp_path: Path, before: str, after: str, detail: str
) -> None:
    """Found when connecting, not when loading: one line naming the file, no traceback."""
    path = tmp_path / "kubeconfig"
    assert before in _GOOD_KUBECONFIG
    path.write_text(_GOOD_KUBECONFIG.replace(before, after))
    with pytest.raises(ConfigError) as caught:
        async with KubeApi.connect("c", str(path), None):
            pass
    message = str(caught.value)
    assert message.startswith(f"cannot load cluster configuration from {path}: {detail}")
    assert "\n" not in message
    assert "secret" not in message


_GOOD_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: a, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: a, context: {cluster: a, user: u}}]
current-context: a
users: [{name: u, user: {token: t}}]
"""


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "context", "fragment"),
    [
        pytest.param("garbage: {", None, "malformed (ParserError: ", id="not-yaml"),
        pytest.param("[1, 2]", None, "malformed (TypeError: ", id="a-list"),
        pytest.param("clusters: 5", None, "malformed (TypeError: ", id="a-number-for-a-list"),
        pytest.param("", None, "malformed (", id="empty"),
        pytest.param(_GOOD_KUBECONFIG, "nope", "Expected object with name nope", id="no-context"),
        pytest.param(None, None, "no such file", id="missing-file"),
    ],
)
async def test_an_unusable_kubeconfig_is_one_line_naming_the_file(
    tmp_path: Path, content: str | None, context: str | None, fragment: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        await load_configuration(str(path), context)
    message = str(caught.value)
    assert message.startswith(f"cannot load cluster configuration from {path}: ")
    assert fragment in message
    assert "\n" not in message


def _exec_kubeconfig(path: Path, plugin: str) -> Path:
    """A kubeconfig whose user's credential comes from the exec plugin `plugin` (a script)."""
    script = path.parent / "plugin.sh"
    script.write_text(f"#!/bin/sh\n{plugin}\n")
    script.chmod(0o755)
    user = f"{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {script}}}}}"
    path.write_text(_GOOD_KUBECONFIG.replace("{token: t}", user))
    return script


_CREDENTIAL = (
    'echo "$KUBERNETES_EXEC_INFO" > "$(dirname "$0")/info"; '
    'echo \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
    '"status": {"token": "from-the-plugin"}}\''
)


@pytest.mark.anyio
async def test_an_exec_credential_plugin_gives_the_token(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    _exec_kubeconfig(path, _CREDENTIAL)
    configuration = await load_configuration(str(path), None)
    assert configuration.api_key["BearerToken"] == "Bearer from-the-plugin"
    info = json.loads((tmp_path / "info").read_text())
    assert info == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("plugin", "fragment"),
    [
        pytest.param(
            'echo $$ > "$(dirname "$0")/pid"; exec sleep 600',
            "gave no credentials within 0.5 s (killed)",
            id="never-answers",
        ),
        pytest.param("echo no login >&2; exit 3", "exited with 3: no login", id="fails"),
        pytest.param("echo hello", "printed no ExecCredential: ", id="prints-something-else"),
        pytest.param(
            _CREDENTIAL.replace("/v1", "/v1beta1"),
            "answered in client.authentication.k8s.io/v1beta1, not client.authentication.k8s.io/v1",
            id="another-version",
        ),
    ],
)
async def test_an_exec_credential_plugin_that_gives_none_is_one_line_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin: str, fragment: str
) -> None:
    monkeypatch.setattr(BoundedExecProvider, "timeout", 0.5)
    path = tmp_path / "kubeconfig"
    script = _exec_kubeconfig(path, plugin)
    with anyio.fail_after(10), pytest.raises(ConfigError) as caught:
        await load_configuration(str(path), None)
    message = str(caught.value)
    assert message.startswith(
        f"cannot load cluster configuration from {path}: the exec credential plugin {script} "
    )
    assert fragment in message
    assert "\n" not in message
    pid_file = tmp_path / "pid"
    if pid_file.exists():  # the plugin given up on is gone, not left running
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("cluster", "warned"),
    [
        ('{server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}', True),
        ('{server: "https://127.0.0.1:6443", insecure-skip-tls-verify: false}', False),
        ('{server: "https://127.0.0.1:6443"}', False),
        ('{server: "http://127.0.0.1:8080", insecure-skip-tls-verify: true}', False),
    ],
    ids=["https-unverified", "https-verified-explicitly", "https", "plain-http"],
)
async def test_a_cluster_whose_tls_is_not_verified_gets_one_warning(
    tmp_path: Path, cluster: str, warned: bool
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(_GOOD_KUBECONFIG.replace('{server: "https://127.0.0.1:6443"}', cluster))
    with structlog.testing.capture_logs() as logs:
        async with KubeApi.connect("east", str(path), None):
            pass
    warnings = [line for line in logs if line["log_level"] == "warning"]
    if not warned:
        assert warnings == []
        return
    assert len(warnings) == 1
    assert warnings[0]["cluster"] == "east"
    assert warnings[0]["event"].startswith(
        "TLS verification is off for this cluster (insecure-skip-tls-verify)"
    )


@pytest.mark.anyio
async def test_a_good_kubeconfig_loads(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(_GOOD_KUBECONFIG)
    configuration = await load_configuration(str(path), None)
    assert configuration.host == "https://127.0.0.1:6443"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("trust", "expected"),
    [
        ("certificate-authority", 200),
        ("insecure-skip-tls-verify", 200),
        (None, "certificate verify failed"),
    ],
    ids=["the-clusters-ca", "verification-off", "no-ca"],
)
async def test_https_as_the_kubeconfig_says(
    tmp_path: Path, certificate: tuple[Path, Path], trust: str | None, expected: int | str
) -> None:
    """Requests to an HTTPS server trust what the kubeconfig says: its CA, or nothing when
    verification is off; a server certificate nobody vouches for is a connection error."""
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status"})

    async with answering(hello, tls) as port:
        cluster: dict[str, object] = {"server": f"https://127.0.0.1:{port}"}
        if trust == "certificate-authority":
            cluster[trust] = str(cert)
        elif trust is not None:
            cluster[trust] = True
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster)
        async with KubeApi.connect("c", kubeconfig, None) as api:
            if isinstance(expected, int):
                assert (await api.request("GET", "/version")).status == expected
            else:
                with pytest.raises(OSError, match=expected):
                    await api.request("GET", "/version")


@pytest.mark.anyio
@pytest.mark.parametrize("proxied", [False, True], ids=["pool", "proxy-aiohttp"])
async def test_a_watch_streams_its_lines_in_reads_and_a_refusal_is_an_error(
    tmp_path: Path, proxied: bool
) -> None:
    """The same lines whichever client carries the watch: through kbatchd's pool, or aiohttp
    when a proxy is configured; an answer that is not 2xx is `WatchHttpError` with its
    Status message."""

    async def watch(request: web.Request) -> web.StreamResponse:
        if request.query.get("resourceVersion") == "old":
            return web.json_response(
                {"kind": "Status", "message": "too old resource version", "code": 410},
                status=410,
            )
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","n":1}\n{"type":"MOD')
        await response.write(b'IFIED","n":2}\n\n{"type":"DELETED","n":3}')
        await response.write_eof()
        return response

    async with answering(watch) as port:
        cluster = {"server": f"http://127.0.0.1:{port}"}
        if proxied:
            cluster["proxy-url"] = f"http://127.0.0.1:{port}"
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster)
        async with KubeApi.connect("c", kubeconfig, None) as api:
            reads = [
                lines
                async for lines in api.stream_lines(
                    "/api/v1/pods", {"watch": "true"}, connect_timeout=5, read_timeout=5
                )
            ]
            with pytest.raises(WatchHttpError, match="HTTP 410: too old resource version"):
                async for _ in api.stream_lines(
                    "/api/v1/pods", {"resourceVersion": "old"}, connect_timeout=5, read_timeout=5
                ):
                    pass
    lines = [json.loads(line)["n"] for read in reads for line in read]
    assert lines == [1, 2, 3]


@asynccontextmanager
async def tunnelling_proxy(refusal: bytes | None = None) -> AsyncIterator[tuple[int, list[bytes]]]:
    """An HTTP proxy on loopback that grants every CONNECT (or answers `refusal` instead): its
    port, and the request heads it received."""
    heads: list[bytes] = []
    tasks: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        if refusal is not None:
            writer.write(refusal)
            await writer.drain()
            writer.close()
            return
        host, port = head.split(b" ")[1].rsplit(b":", 1)
        upstream = await asyncio.open_connection(host.decode(), int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for source, sink in ((reader, upstream[1]), (upstream[0], writer)):
            task = asyncio.create_task(pipe(source, sink))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.anyio
@pytest.mark.parametrize("granted", [True, False], ids=["tunnel", "refused"])
async def test_https_through_a_proxy_goes_through_a_tunnel(
    tmp_path: Path, certificate: tuple[Path, Path], granted: bool
) -> None:
    """The proxy is asked for a tunnel with the kubeconfig's proxy credentials and sees only
    TLS; a refusal is a connection error naming the proxy and its answer."""
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path})

    refusal = None if granted else b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n"
    async with answering(hello, tls) as port, tunnelling_proxy(refusal) as (proxy, heads):
        cluster = {
            "server": f"https://127.0.0.1:{port}",
            "certificate-authority": str(cert),
            "proxy-url": f"http://me:p%40ss@127.0.0.1:{proxy}",
        }
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster)
        async with KubeApi.connect("c", kubeconfig, None) as api:
            if granted:
                answer = await api.request("GET", "/version")
                assert (answer.status, json.loads(answer.body)) == (200, {"path": "/version"})
            else:
                with pytest.raises(
                    ConnectionError,
                    match=f"through the proxy 127.0.0.1:{proxy}: .*refused a tunnel .HTTP 407",
                ):
                    await api.request("GET", "/version")
    [head] = heads
    assert head.startswith(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n".encode())
    assert f"Proxy-Authorization: {_BASIC}\r\n".encode() in head
