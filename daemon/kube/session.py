"""How kbatchd reaches one API server: its URL, TLS, proxy and connection limit as the client
library's configuration gives them, one aiohttp session on them, and aiohttp's failures said
in one line that names the server."""

from __future__ import annotations

import base64
import ipaddress
import re
import ssl
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import aiohttp
import msgspec
from kubernetes_asyncio import client
from yarl import URL

from daemon.kube.errors import ConfigError

# A connection idle for longer is closed instead of reused: a NAT or load balancer may have
# forgotten it without a word, and a request written into it would wait for its whole deadline.
KEEPALIVE_SECONDS: Final = 15.0


class Endpoint(msgspec.Struct, frozen=True):
    """One API server as requests reach it: directly, or through an HTTP `proxy` (a tunnel to
    a TLS server, absolute-form requests to a plain one) with its `proxy_headers`."""

    url: URL
    host: str
    port: int
    tls: ssl.SSLContext | None
    server_hostname: str | None = None
    proxy: URL | None = None
    proxy_headers: dict[str, str] = {}
    limit: int = 0  # connections open at once; 0: no limit

    @property
    def where(self) -> str:
        """The server (and its proxy) as an error message names it."""
        authority = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        if self.proxy is None:
            return authority
        return f"{authority} through the proxy {self.proxy.host}:{self.proxy.port}"


def endpoint(configuration: client.Configuration) -> Endpoint:
    """The configured server, through its proxy if it names one."""
    url, host, port = server_url(configuration)
    proxy, headers = _proxy(configuration) if configuration.proxy else (None, {})
    name = configuration.tls_server_name
    if name is not None and not isinstance(name, str):  # the kubeconfig's YAML may hold any
        raise ConfigError("the TLS server name (tls-server-name) is not a string")
    return Endpoint(
        url,
        host,
        port,
        ssl_context(configuration) if url.scheme == "https" else None,
        configuration.tls_server_name,
        proxy,
        headers,
        configuration.connection_pool_maxsize or 0,  # the library's None: no limit, as aiohttp's 0
    )


def open_session(endpoint: Endpoint) -> aiohttp.ClientSession:
    """The session every request and watch to `endpoint` goes through."""
    connector = aiohttp.TCPConnector(
        ssl=endpoint.tls if endpoint.tls is not None else True,
        limit=endpoint.limit,
        keepalive_timeout=KEEPALIVE_SECONDS,
    )
    return aiohttp.ClientSession(
        connector=connector,
        # The proxy is read from the environment once (`proxy_from_environment`), not per
        # request; the API server sets no cookies.
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        # Answers come uncompressed, as they always have: on loopback and in a cluster's own
        # network compression costs both ends more CPU than it saves.
        skip_auto_headers=("Accept-Encoding",),
    )


@contextmanager
def failures(endpoint: Endpoint, timeout: str) -> Iterator[None]:
    """aiohttp's failures as `TimeoutError` (saying `timeout` unless aiohttp says which one)
    and `ConnectionError`, each one line naming the server."""
    try:
        yield
    except TimeoutError as exc:  # aiohttp's connect and read timeouts are ClientErrors too
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            raise TimeoutError(f"connecting to {endpoint.where} timed out") from exc
        raise TimeoutError(f"{endpoint.where}: {timeout}") from exc
    except aiohttp.ClientHttpProxyError as exc:
        raise ConnectionError(
            f"cannot connect to {endpoint.where}: the proxy refused a tunnel (HTTP {exc.status})"
        ) from exc
    except aiohttp.ClientConnectorCertificateError as exc:
        raise ConnectionError(
            f"cannot connect to {endpoint.where}: {exc.certificate_error}"
        ) from exc
    except aiohttp.ClientConnectorError as exc:
        raise ConnectionError(f"cannot connect to {endpoint.where}: {exc.os_error}") from exc
    except aiohttp.ClientError as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ConnectionError(f"{endpoint.where}: {detail}") from exc


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
    if not isinstance(text, str):  # from a kubeconfig's YAML, which may hold any type there
        raise ValueError("is not a URL (not a string)")
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


def server_url(configuration: client.Configuration) -> tuple[URL, str, int]:
    """The configured API server's URL, and its host and port."""
    try:
        return connectable_url(configuration.host or "", ("http", "https"))
    except ValueError as exc:
        raise ConfigError(f"the API server URL {configuration.host!r} {exc}") from None


def _proxy(configuration: client.Configuration) -> tuple[URL, dict[str, str]]:
    """The configured proxy: an http:// URL (without its user and password, which are sent as
    Basic ``Proxy-Authorization``) and the headers it is sent, the configuration's own too."""
    try:
        url, _, _ = connectable_url(configuration.proxy or "", ("http",))
    except ValueError as exc:
        try:
            shown = f" {URL(configuration.proxy or '').with_password(None)!s}"
        except (ValueError, TypeError):  # TypeError: not a string
            shown = ""  # not even a URL: it is not shown, in case it holds a password
        raise ConfigError(f"the proxy URL{shown} {exc}") from None
    headers = {name: str(value) for name, value in (configuration.proxy_headers or {}).items()}
    if url.user is not None:
        credentials = f"{url.user}:{url.password or ''}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    return url.with_user(None), headers
