"""Properties of reading a kubeconfig that cannot be used: a good one with random values of
the wrong type, keys removed, contexts, users and clusters that name what is not there, files
that do not exist, YAML or JSON that is broken.

The promise: `KubeApi.connect` connects, or raises one `ConfigError` whose message is one line
naming the file; nothing else (the library walks what it parses unvalidated, and its errors
span lines).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from daemon.kube.api import ConfigError, KubeApi
from tests.daemon.kube.test_api import _GOOD_KUBECONFIG
from tests.strategies import damaged_json

GOOD = yaml.safe_load(_GOOD_KUBECONFIG)
_SERVER = '"https://127.0.0.1:6443"'

# What a kubeconfig's entries hold, and what they may name that is not there. Never `exec`
# or `auth-provider`: those run commands or reach the network.
FIELDS = (
    "apiVersion", "kind", "clusters", "contexts", "users", "current-context", "name",
    "cluster", "context", "user", "namespace", "server", "certificate-authority",
    "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name", "proxy-url",
    "client-certificate", "client-certificate-data", "client-key", "client-key-data", "token",
    "tokenFile", "username", "password", "preferences", "extensions",
)  # fmt: skip
WORDS = st.sampled_from(
    ["a", "u", "nope", "", "https://127.0.0.1:6443", "http://[::zz]:x", "ftp://x",
     "https://127.0.0.1:99999", "/no/such/file", "bm90IGEgY2VydAo=", "not base64!", "~/x",
     "http://me:secret@proxy:3128", "socks5://p:1080", "true"]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=10),
    WORDS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS), inner, max_size=3)
    ),
    max_leaves=8,
)


def damaged() -> st.SearchStrategy[Any]:
    """The good kubeconfig with a few places replaced, removed, or given another field."""
    return damaged_json(GOOD, VALUES, FIELDS)


@st.composite
def kubeconfig_text(draw: st.DrawFn) -> str:
    doc = draw(damaged())
    text = draw(st.sampled_from([yaml.safe_dump(doc), json.dumps(doc), yaml.safe_dump(doc)[:-7]]))
    if draw(st.booleans()):  # broken as text: a character or two changed
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at] + draw(st.sampled_from(["", ":", "{", "[", "'", "\t", "- "])) + text[at + 1 :]
        )
    return text


async def _connect(path: Path, context: str | None) -> None:
    async with KubeApi.connect("c", str(path), context) as api:
        # What connects must be usable (a kubeconfig's YAML may hold any type anywhere, and
        # aiohttp fails on the first request with what it cannot use): a request can be made
        # ready, and the endpoint's fields have their declared types.
        await api._target("/api", {"limit": 1}, "application/json")
        server = api._server
        assert isinstance(server.host, str)
        assert isinstance(server.port, int)
        assert server.server_hostname is None or isinstance(server.server_hostname, str)
        assert all(isinstance(v, str) for v in server.proxy_headers.values())


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kubeconfig_text(), st.sampled_from([None, "a", "nope"]))
@example("current-context: a\ncontexts: [{name: a, context: 5}]\n", None)
# A proxy URL that is no string (TypeError from yarl); a TLS server name that is none, taken
# at connect and failing the first request (AttributeError inside aiohttp).
@example(_GOOD_KUBECONFIG.replace(_SERVER, _SERVER + ", proxy-url: 5"), None)
@example(_GOOD_KUBECONFIG.replace(_SERVER, _SERVER + ", proxy-url: {a: 1}"), None)
@example(_GOOD_KUBECONFIG.replace(_SERVER, _SERVER + ", tls-server-name: 5"), None)
@example(_GOOD_KUBECONFIG.replace("{token: t}", "{tokenFile: /no/such/file}"), None)
@example(_GOOD_KUBECONFIG.replace("{token: t}", "{client-certificate: /no/such/file}"), None)
def test_any_kubeconfig_connects_or_is_one_config_error_naming_the_file(
    tmp_path: Path, text: str, context: str | None
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text, encoding="utf-8")
    try:
        anyio.run(_connect, path, context)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"cannot load cluster configuration from {path}: "), message
        assert "\n" not in message, message
