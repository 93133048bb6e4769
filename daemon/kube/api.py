"""Raw JSON to and from the API server, configured and authenticated by kubernetes-asyncio.

The client library supplies kubeconfig and in-cluster configuration, authentication, TLS
and proxy settings; kbatchd sends and receives raw bytes and decodes them with
msgspec into slim structs, never building the generated model objects (too slow for the watch
path). Requests and watches go through `daemon.kube.http`'s connection pool (a third of
aiohttp's CPU a request), through a proxy too; the library's own aiohttp session is not used.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import ssl
import subprocess
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import msgspec
import structlog
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.exec_provider import ExecProvider
from yarl import URL

from daemon.kube.errors import ConfigError
from daemon.kube.http import HttpPool, Proxy

log = structlog.get_logger("kbatchd")

JSON = "application/json"
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class Response(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def status_message(self) -> str:
        """The `message` of a Kubernetes Status body, or the start of whatever came back."""
        try:
            decoded = msgspec.json.decode(self.body, type=_Status)
        except msgspec.DecodeError:
            return self.body[:200].decode("utf-8", "replace")
        return decoded.message or decoded.reason

    def status_reason(self) -> str:
        """The `reason` of a Kubernetes Status body (``AlreadyExists``, ``Conflict``, …)."""
        try:
            return msgspec.json.decode(self.body, type=_Status).reason
        except msgspec.DecodeError:
            return ""


class _Status(msgspec.Struct):
    message: str = ""
    reason: str = ""


# How long a kubeconfig's exec credential plugin (`users[].user.exec`) may take. client-go waits
# for ever, which suits a person at a terminal; a daemon that waits for ever starts silently
# never. The plugin is killed when its time is up.
EXEC_PLUGIN_TIMEOUT_SECONDS: Final = 60.0


class _ExecCredential(msgspec.Struct, rename="camel"):
    api_version: str
    kind: str
    status: dict[str, Any]


class BoundedExecProvider(ExecProvider):
    """The library's exec credential plugin, run with a deadline (its own run waits for
    ever, and a plugin it gave up on would live on): the command, arguments, environment and
    apiVersion as the library read them from the kubeconfig."""

    timeout: float = EXEC_PLUGIN_TIMEOUT_SECONDS

    async def run(self, previous_response: str | None = None) -> Any:
        command = self.args[0]
        info = {"apiVersion": self.api_version, "kind": "ExecCredential"}
        # A daemon is never interactive, and the plugin gets no stdin to ask on.
        spec: dict[str, Any] = {"interactive": False}
        if previous_response:
            spec["response"] = previous_response
        exec_info = msgspec.json.encode({**info, "spec": spec}).decode()
        env = {**self.env, "KUBERNETES_EXEC_INFO": exec_info}
        try:
            with anyio.fail_after(self.timeout):
                done = await anyio.run_process(self.args, env=env, stdin=subprocess.DEVNULL)
        except TimeoutError:
            raise config.ConfigException(
                f"the exec credential plugin {command} gave no credentials within "
                f"{self.timeout:g} s (killed)"
            ) from None
        except subprocess.CalledProcessError as exc:
            said = " ".join(exc.stderr.decode("utf-8", "replace").split())[-300:]
            raise config.ConfigException(
                f"the exec credential plugin {command} exited with {exc.returncode}"
                + (f": {said}" if said else "")
            ) from None
        except OSError as exc:
            raise config.ConfigException(
                f"cannot run the exec credential plugin {command}: {exc.strerror or exc}"
            ) from None
        try:
            answer = msgspec.json.decode(done.stdout, type=_ExecCredential)
        except msgspec.DecodeError as exc:
            raise config.ConfigException(
                f"the exec credential plugin {command} printed no ExecCredential: {exc}"
            ) from None
        if answer.api_version != self.api_version:
            raise config.ConfigException(
                f"the exec credential plugin {command} answered in {answer.api_version}, "
                f"not {self.api_version}"
            )
        return answer.status


# The library looks the class up by this name each time it runs a plugin.
kube_config.ExecProvider = BoundedExecProvider  # type: ignore[attr-defined]


async def load_configuration(kubeconfig: str | None, context: str | None) -> client.Configuration:
    """As kubectl finds it: the given kubeconfig, else the default one, else in-cluster."""
    configuration = client.Configuration()
    if kubeconfig is not None and not await anyio.Path(kubeconfig).is_file():
        # The library only warns and goes on with an empty configuration, whose error then
        # speaks of a missing current-context.
        raise ConfigError(f"cannot load cluster configuration from {kubeconfig}: no such file")
    try:
        if kubeconfig is not None or context is not None:
            await config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
            return configuration
        try:
            await config.load_kube_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_incluster_config(client_configuration=configuration)
    except Exception as exc:
        # The library parses the file as YAML and walks what it finds unvalidated: beside its
        # own ConfigException, a malformed file raises whatever the walk meets (a YAML error,
        # TypeError for a list or a number where a mapping belongs, ...). All mean the same.
        where = kubeconfig or "the default kubeconfig or in-cluster configuration"
        known = (config.ConfigException, OSError, KeyError, ValueError)
        detail = str(exc) if isinstance(exc, known) else f"malformed ({type(exc).__name__}: {exc})"
        message = " ".join(detail.split())  # one line: YAML errors span several
        raise ConfigError(f"cannot load cluster configuration from {where}: {message}") from exc
    return configuration


def proxy_from_environment(url: str | None) -> str | None:
    """The proxy the environment (``HTTPS_PROXY``, ``NO_PROXY``, …) names for the API server,
    read once as kubectl does at start-up."""
    if not url:
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    if not host or urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies_environment()
    scheme = urllib.parse.urlsplit(url).scheme or "https"
    return proxies.get(scheme) or proxies.get("all")


def ssl_context(configuration: client.Configuration) -> ssl.SSLContext:
    """The TLS settings of a client configuration, as the library applies them to its own
    connector (whose context is not public)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


_HOST_NAME: Final = re.compile(r"^[A-Za-z0-9_.-]+$")


def connectable_url(text: str, schemes: tuple[str, ...]) -> tuple[URL, str, int]:
    """`text` as a URL of one of `schemes`, and its host and port to connect to; ValueError
    saying what is wrong with it otherwise (never naming a password)."""
    try:
        url = URL(text)
        port = url.port
    except ValueError as exc:
        raise ValueError(f"is not a URL ({exc})") from None
    if url.scheme not in schemes:
        raise ValueError(f"is not an {' or '.join(f'{s}://' for s in schemes)} URL")
    host = url.raw_host or ""
    if ":" in host:  # between brackets: yarl keeps whatever it finds there
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"has an invalid IPv6 address {host!r}") from None
    elif not _HOST_NAME.match(host):
        raise ValueError(f"has an invalid host {host!r}")
    if port is None:
        raise ValueError("has no port")
    return url, host, port


def connection_pool(configuration: client.Configuration) -> HttpPool:
    """The pool for requests and watches to the configured server, through its proxy if it
    names one."""
    url, host, port = server_url(configuration)
    limit = configuration.connection_pool_maxsize
    return HttpPool(
        host,
        port,
        ssl_context=ssl_context(configuration) if url.scheme == "https" else None,
        server_hostname=configuration.tls_server_name,
        # The library's setting: None means no limit.
        limit=limit if limit else 1 << 20,
        proxy=_proxy(configuration) if configuration.proxy else None,
    )


def _proxy(configuration: client.Configuration) -> Proxy:
    """The configured proxy: an http:// URL, its user and password (if any) sent as Basic
    ``Proxy-Authorization``, with the configuration's own proxy headers."""
    try:
        url, host, port = connectable_url(configuration.proxy or "", ("http",))
    except ValueError as exc:
        try:
            shown = f" {URL(configuration.proxy or '').with_password(None)!s}"
        except ValueError:
            shown = ""  # not even a URL: it is not shown, in case it holds a password
        raise ConfigError(f"the proxy URL{shown} {exc}") from None
    headers = dict(configuration.proxy_headers or {})
    if url.user is not None:
        credentials = f"{url.user}:{url.password or ''}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    for name, value in headers.items():
        _check_header(name, str(value))
    return Proxy(host, port, tuple((k, str(v)) for k, v in headers.items()))


def server_url(configuration: client.Configuration) -> tuple[URL, str, int]:
    """The configured API server's URL, and its host and port."""
    try:
        return connectable_url(configuration.host or "", ("http", "https"))
    except ValueError as exc:
        raise ConfigError(f"the API server URL {configuration.host!r} {exc}") from None


def _check_header(name: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise ValueError(f"the {name} header of a request contains a line break")


_AUTH: Final = ["BearerToken"]
_encode: Final = msgspec.json.Encoder().encode
# What a request path keeps as it is: API names never need quoting, so this only guards the
# request line against a stray space or control character.
_PATH_SAFE: Final = "/:@!$&'()*+,;=-._~"


class KubeApi:
    """One cluster's API."""

    def __init__(self, cluster: str, api_client: client.ApiClient, pool: HttpPool) -> None:
        self.cluster = cluster
        self._client = api_client
        host = api_client.configuration.host
        if not host:
            raise ValueError(f"cluster {cluster}: the client configuration names no server")
        # A server URL may carry a path (a cluster behind a proxy that routes by path).
        base = URL(host)
        self._prefix = base.raw_path.rstrip("/")
        self._authority = base.host_port_subcomponent
        self._pool = pool

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, cluster: str, kubeconfig: str | None, context: str | None
    ) -> AsyncIterator[KubeApi]:
        configuration = await load_configuration(kubeconfig, context)
        try:
            url, _, _ = server_url(configuration)  # before the proxy lookup parses it
            if configuration.proxy is None:
                configuration.proxy = proxy_from_environment(configuration.host)
            pool = connection_pool(configuration)
            # The library's client for its configuration and authentication; its own aiohttp
            # session (made here, closed on leaving) carries nothing.
            api_client = client.ApiClient(configuration=configuration)
        except (ConfigError, OSError) as exc:  # ssl.SSLError is an OSError
            where = kubeconfig or "the default kubeconfig or in-cluster configuration"
            detail = str(exc)
            if not isinstance(exc, ConfigError):
                detail = f"its TLS certificates or key cannot be loaded: {exc}"
            raise ConfigError(f"cannot load cluster configuration from {where}: {detail}") from exc
        if url.scheme == "https" and not configuration.verify_ssl:
            log.warning(
                "TLS verification is off for this cluster (insecure-skip-tls-verify): anyone "
                "between kbatchd and the API server can read and change what they say",
                cluster=cluster,
            )
        try:
            async with api_client:
                yield cls(cluster, api_client, pool)
        finally:
            await pool.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = JSON,
        request_timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One request; `headers` are added to the usual ones (a ``traceparent``, say)."""
        data = None if body is None else _encode(body)
        head = await self._head(method, path, query, content_type, data, headers)
        status, answer, retry_after = await self._pool.request(head, data, within=request_timeout)
        return Response(status, answer, _retry_after(retry_after))

    async def _head(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int] | None,
        content_type: str,
        data: bytes | None,
        extra: Mapping[str, str] | None = None,
    ) -> bytes:
        """A request's line and headers for the pool, authenticated as the library would.
        (Not the library's request path: `call_api` walks every body to turn generated model
        objects into JSON values, and every body here is a JSON value, encoded once.)"""
        headers = {**self._client.default_headers, "Accept": JSON, "Content-Type": content_type}
        if extra:
            headers.update(extra)
        params: list[tuple[str, str | int]] = list(query.items()) if query else []
        await self._client.update_params_for_auth(headers, params, _AUTH)
        pool = self._pool
        target = pool.forward_prefix + urllib.parse.quote(self._prefix + path, safe=_PATH_SAFE)
        if params:
            target = f"{target}?{urllib.parse.urlencode(params)}"
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {self._authority}"]
        for name, value in headers.items():
            value = str(value)
            _check_header(name, value)
            lines.append(f"{name}: {value}")
        lines.extend(f"{name}: {value}" for name, value in pool.forward_headers)
        if data is not None:
            lines.append(f"Content-Length: {len(data)}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1")

    async def stream_lines(
        self,
        path: str,
        query: Mapping[str, str | int],
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> AsyncIterator[list[bytes]]:
        """The lines of a streaming response (a watch), in lists: the complete lines of each
        read, so that a burst of events is handled together. A non-2xx answer
        raises `WatchHttpError` with the response; no bytes for `read_timeout` raises a
        timeout (the inactivity deadline: the server sends bookmarks well within it)."""
        pending = b""
        async for chunk in self._stream(path, query, connect_timeout, read_timeout):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            complete = [line for line in lines if line.strip()]
            if complete:
                yield complete
        if pending.strip():
            yield [pending]

    async def _stream(
        self, path: str, query: Mapping[str, str | int], connect: float, read: float
    ) -> AsyncIterator[bytes]:
        head = await self._head("GET", path, query, JSON, None)
        async with self._pool.stream(head, within=connect, idle=read) as stream:
            if not 200 <= stream.status < 300:
                body = b"".join([piece async for piece in stream])
                raise WatchHttpError(Response(stream.status, body))
            async for piece in stream:
                yield piece


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (an HTTP date is not used by the API server)."""
    return float(value) if value and value.isdigit() else None


class WatchHttpError(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(f"HTTP {response.status}: {response.status_message()}")
        self.response = response
