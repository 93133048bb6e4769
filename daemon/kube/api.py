"""Raw JSON to and from the API server, configured and authenticated by kubernetes-asyncio.

The client library supplies kubeconfig and in-cluster configuration, authentication, TLS
and proxy settings; kbatchd sends and receives raw bytes through one aiohttp session a cluster
(`daemon.kube.session`) and decodes them with msgspec into slim structs, never building the
generated model objects (too slow for the watch path). The library's own session carries
nothing.
"""

from __future__ import annotations

import subprocess
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import aiohttp
import anyio
import msgspec
import structlog
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.exec_provider import ExecProvider
from yarl import URL

from daemon.kube.errors import ConfigError
from daemon.kube.session import (
    Endpoint,
    endpoint,
    failures,
    open_session,
    proxy_from_environment,
    server_url,
)

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


_AUTH: Final = ["BearerToken"]
# What aiohttp itself sends again on a connection the server closed unanswered: RFC 9110's
# idempotent methods.
_RESENT_BY_AIOHTTP: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_encode: Final = msgspec.json.Encoder().encode
# What a request path keeps as it is: API names never need quoting, so this only guards the
# request line against a stray space or control character.
_PATH_SAFE: Final = "/:@!$&'()*+,;=-._~"


class KubeApi:
    """One cluster's API."""

    def __init__(
        self,
        cluster: str,
        api_client: client.ApiClient,
        session: aiohttp.ClientSession,
        server: Endpoint,
    ) -> None:
        self.cluster = cluster
        self._client = api_client
        self._session = session
        self._server = server
        # A server URL may carry a path (a cluster behind a proxy that routes by path).
        self._base = str(server.url.with_path("").with_query(None).with_fragment(None))
        self._prefix = server.url.raw_path.rstrip("/")
        # Per request: through the proxy, to the server's TLS name, never redirected.
        self._options: dict[str, Any] = {"allow_redirects": False}
        if server.proxy is not None:
            self._options.update(proxy=server.proxy, proxy_headers=server.proxy_headers)
        if server.tls is not None and server.server_hostname:
            self._options["server_hostname"] = server.server_hostname

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
            server = endpoint(configuration)
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
        async with api_client, open_session(server) as session:
            yield cls(cluster, api_client, session, server)

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
        """One request; `headers` are added to the usual ones (a ``traceparent``, say). Raises
        `TimeoutError` when no complete answer came within `request_timeout` seconds, and
        `ConnectionError` when the server could not be reached or its answer not read."""
        data = None if body is None else _encode(body)
        url, sent = await self._target(path, query, content_type, headers)
        deadline = anyio.current_time() + request_timeout
        with failures(self._server, f"no answer within {request_timeout:g} s"):
            try:
                return await self._send(method, url, data, sent, request_timeout)
            except aiohttp.ServerDisconnectedError:
                # The server closed a kept-alive connection without answering (its idle
                # timeout racing the request). aiohttp has sent an idempotent request again
                # already; kbatchd's POSTs and PATCHes may go again too, as one that did arrive
                # is refused as already done (AlreadyExists, Conflict), which callers take as
                # done.
                if method in _RESENT_BY_AIOHTTP:
                    raise
                return await self._send(method, url, data, sent, deadline - anyio.current_time())

    async def _send(
        self, method: str, url: URL, data: bytes | None, headers: dict[str, str], within: float
    ) -> Response:
        # Never 0, which aiohttp takes for no deadline at all.
        timeout = aiohttp.ClientTimeout(total=max(within, 0.001))
        async with self._session.request(
            method, url, data=data, headers=headers, timeout=timeout, **self._options
        ) as answer:
            body = await answer.read()
            return Response(answer.status, body, _retry_after(answer.headers.get("Retry-After")))

    async def _target(
        self,
        path: str,
        query: Mapping[str, str | int] | None,
        content_type: str,
        extra: Mapping[str, str] | None = None,
    ) -> tuple[URL, dict[str, str]]:
        """A request's URL and headers, authenticated as the library would. (Not the library's
        request path: `call_api` walks every body to turn generated model objects into JSON
        values, and every body here is a JSON value, encoded once.)"""
        headers = {**self._client.default_headers, "Accept": JSON, "Content-Type": content_type}
        if extra:
            headers.update(extra)
        params: list[tuple[str, str | int]] = list(query.items()) if query else []
        await self._client.update_params_for_auth(headers, params, _AUTH)
        target = self._base + urllib.parse.quote(self._prefix + path, safe=_PATH_SAFE)
        if params:
            target = f"{target}?{urllib.parse.urlencode(params)}"
        return URL(target, encoded=True), {name: str(value) for name, value in headers.items()}

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
        raises `WatchHttpError` with the response. No bytes for `read_timeout` (the
        inactivity deadline: the server sends bookmarks well within it) raises a timeout
        before the answer, and `StreamStalled` after it."""
        url, headers = await self._target(path, query, JSON)
        timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
        with failures(self._server, f"no data for {read_timeout:g} s from the server"):
            async with self._session.get(
                url, headers=headers, timeout=timeout, **self._options
            ) as answer:
                if not 200 <= answer.status < 300:
                    raise WatchHttpError(Response(answer.status, await answer.read()))
                pending = b""
                try:
                    # Whatever arrived, split into lines here: `readline` would hand them one
                    # at a time, and refuses a line longer than its buffer (a large object's
                    # event).
                    async for piece in answer.content.iter_any():
                        pending += piece
                        *lines, pending = pending.split(b"\n")
                        complete = [line for line in lines if line.strip()]
                        if complete:
                            yield complete
                except TimeoutError as exc:
                    raise StreamStalled(
                        f"{self._server.where}: the watch sent nothing for {read_timeout:g} s"
                    ) from exc
                if pending.strip():
                    yield [pending]


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (an HTTP date is not used by the API server)."""
    return float(value) if value and value.isdigit() else None


class StreamStalled(Exception):
    """A watch the server answered, then left silent past the inactivity deadline: a wedged
    stream (a half-open connection, a stuck proxy) of a server that answers, not a server
    that cannot be reached."""


class WatchHttpError(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(f"HTTP {response.status}: {response.status_message()}")
        self.response = response
