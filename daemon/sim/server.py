"""The HTTP face of the simulated API server (aiohttp): path routing as the real server does
it, discovery, list/get/create/update/patch/delete, subresources and watch.

Every failure is answered as a `Status` object; nothing escapes as a traceback.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import importlib
import logging
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict

from daemon.sim import discovery, tables
from daemon.sim.errors import (
    ApiError,
    bad_request,
    expired,
    internal_error,
    invalid_object,
    method_not_allowed,
    not_supported,
    page_not_found,
    unsupported_media_type,
)
from daemon.sim.faults import Faults
from daemon.sim.registry import (
    APPLY_PATCH,
    FIELD_VALIDATIONS,
    FieldValidation,
    Registry,
    delete_options,
)
from daemon.sim.resources import Resource, lookup
from daemon.sim.selectors import combine, field_selector, label_selector
from daemon.sim.store import Expired, Store, decode, encode
from daemon.sim.watching import WatchRequest, serve_watch

log = logging.getLogger(__name__)

# Request bodies up to this size: generous, it is a test server (aiohttp's default is 1 MiB).
_MAX_BODY: Final = 64 * 1024 * 1024

JSON: Final = "application/json"
_CONTINUE_TOO_OLD: Final = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


@dataclass(frozen=True, slots=True)
class Route:
    resource: Resource
    namespace: str  # "" for cluster-scoped kinds and all-namespaces collections
    name: str  # "" for collections
    subresource: str


def resource_route(group: str, version: str, rest: list[str]) -> Route | None:
    """The object or collection the path segments after ``/api/v1`` or ``/apis/GROUP/VERSION``
    name; None for a kind or a shape there is no resource at."""
    if len(rest) >= 3 and rest[0] == "namespaces":
        resource = lookup(group, version, rest[2])
        if resource is not None and resource.namespaced and len(rest) <= 5:
            return Route(
                resource,
                rest[1],
                rest[3] if len(rest) > 3 else "",
                rest[4] if len(rest) > 4 else "",
            )
    if 1 <= len(rest) <= 3:
        resource = lookup(group, version, rest[0])
        if resource is not None and (len(rest) == 1 or not resource.namespaced):
            name = rest[1] if len(rest) > 1 else ""
            sub = rest[2] if len(rest) > 2 else ""
            return Route(resource, "", name, sub)
    return None


def route_of(path: str) -> Route | None:
    """The resource a request path is for; None for discovery, /version, and paths
    `resource_route` finds nothing at."""
    parts = [part for part in path.split("/") if part]
    if parts[:2] == ["api", "v1"]:
        return resource_route("", "v1", parts[2:])
    if len(parts) >= 3 and parts[0] == "apis":
        return resource_route(parts[1], parts[2], parts[3:])
    return None


def status_response(error: ApiError) -> web.Response:
    return web.Response(
        body=encode(error.status()), status=error.code, content_type=JSON, headers=error.headers
    )


def _json(body: bytes, status: int = 200, content_type: str = JSON) -> web.Response:
    return web.Response(body=body, status=status, headers={"Content-Type": content_type})


def _written(body: bytes, fields: FieldValidation, status: int = 200) -> web.Response:
    """A write's answer, with a `Warning` header per unknown field it dropped."""
    headers = CIMultiDict([("Content-Type", JSON)])
    for warning in fields.warnings:
        headers.add("Warning", f"299 - {encode(warning).decode()}")
    return web.Response(body=body, status=status, headers=headers)


def _field_validation(request: web.BaseRequest, options: str) -> FieldValidation:
    """`fieldValidation` of a create, update or patch (`options`: the kind of its options)."""
    value = request.query.get("fieldValidation", "")
    if value and value not in FIELD_VALIDATIONS:
        supported = ("", *FIELD_VALIDATIONS)
        error = not_supported("fieldValidation", value, supported)
        raise invalid_object(options, "meta.k8s.io", "", [error])
    return FieldValidation(value or "Warn")


def _success(details: dict[str, Any], code: int = 200) -> web.Response:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
    return _json(encode(status), code)


def encode_continue(rv: int, key: str) -> str:
    token = encode({"v": "meta.k8s.io/v1", "rv": rv, "start": key + "\x00"})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = decode(raw)
        rv, start = int(data["rv"]), str(data["start"])
    except (binascii.Error, msgspec.DecodeError, KeyError, TypeError, ValueError):
        raise bad_request(f"continue key is not valid: {token!r}") from None
    if data.get("v") != "meta.k8s.io/v1" or rv < 1:
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion")
    return rv, start.rstrip("\x00")


def _int_param(query: Any, name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f"invalid {name}: {value!r} is not an integer") from None


def is_true(value: str | None) -> bool:
    """A boolean query parameter as the API server reads one."""
    return value is not None and value.lower() in ("true", "1")


def _yaml() -> Any:
    # PyYAML arrives with kubernetes-asyncio; YAML bodies are only decoded when it is there.
    try:
        return importlib.import_module("yaml")
    except ImportError:
        return None


class ApiServer:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        faults: Faults,
        *,
        bookmark_seconds: float = 60.0,
        watch_timeout: float = 1800.0,
        token: str | None = None,
    ):
        self.store = store
        self.registry = registry
        self.faults = faults
        self.bookmark_seconds = bookmark_seconds
        self.watch_timeout = watch_timeout
        self.token = token
        self.address = "127.0.0.1:0"
        self._runner: web.ServerRunner | None = None
        self.url = ""

    def _request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        return web.BaseRequest(
            message, payload, protocol, writer, task, task.get_loop(), client_max_size=_MAX_BODY
        )

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        # aiohttp's low-level server: every request goes to `handle`, which dispatches on the
        # path itself, so an Application's router (a regex match and a match-info object per
        # request, ~6 % of the simulated cluster's CPU) has nothing to add.
        server = web.Server(self.handle, request_factory=self._request, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        listening = site._server
        assert listening is not None
        sockets = getattr(listening, "sockets", None) or ()
        bound = sockets[0].getsockname()[1] if sockets else port
        self.address = f"{host}:{bound}"
        self.url = f"http://{self.address}"
        return self.url

    async def close(self) -> None:
        self.store.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- entry ------------------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            if (
                self.token is not None
                and request.headers.get("Authorization") != f"Bearer {self.token}"
            ):
                return status_response(ApiError(401, "Unauthorized", "Unauthorized"))
            return await self._dispatch(request)
        except ApiError as error:
            return status_response(error)
        except ConnectionError:
            raise
        except Exception as exc:
            log.exception("sim api: %s %s failed", request.method, request.path_qs)
            return status_response(internal_error(f"{type(exc).__name__}: {exc}"))

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json(
                encode(
                    {
                        "paths": [
                            "/api",
                            "/api/v1",
                            "/apis",
                            "/openapi/v2",
                            "/openapi/v3",
                            "/version",
                        ]
                    }
                )
            )
        head = parts[0]
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if head == "version":
            return _json(encode(discovery.VERSION))
        if head == "openapi":
            return self._openapi(parts[1:])
        if head == "api":
            if len(parts) == 1:
                return self._discovery_root(request, legacy=True)
            if parts[1] != "v1":
                raise page_not_found(request.path)
            return await self._api(request, "", "v1", parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return self._discovery_root(request, legacy=False)
            if len(parts) == 2:
                group = discovery.group(parts[1])
                if group is None:
                    raise page_not_found(request.path)
                return _json(encode(group))
            return await self._api(request, parts[1], parts[2], parts[3:])
        raise page_not_found(request.path)

    # -- discovery --------------------------------------------------------------------------

    def _discovery_root(self, request: web.BaseRequest, *, legacy: bool) -> web.Response:
        accept = request.headers.get("Accept", "")
        for content_type, api_version in (
            (discovery.AGGREGATED, "apidiscovery.k8s.io/v2"),
            (discovery.AGGREGATED_BETA, "apidiscovery.k8s.io/v2beta1"),
        ):
            if "g=apidiscovery.k8s.io" in accept and api_version.split("/")[
                1
            ] in _accepted_versions(accept):
                return _json(
                    encode(discovery.aggregated(legacy, api_version)), content_type=content_type
                )
        if legacy:
            return _json(encode(discovery.api_versions(self.address)))
        return _json(encode(discovery.group_list()))

    def _openapi(self, parts: list[str]) -> web.Response:
        if parts == ["v2"]:
            return _json(encode(discovery.openapi_v2()))
        if parts == ["v3"]:
            return _json(encode(discovery.openapi_v3_root()))
        if parts and parts[0] == "v3":
            document = discovery.openapi_v3_group("/".join(parts[1:]))
            if document is not None:
                return _json(encode(document))
        raise page_not_found("/openapi/" + "/".join(parts))

    # -- resources --------------------------------------------------------------------------

    async def _api(
        self, request: web.BaseRequest, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        if not rest:
            listing = discovery.resource_list(group, version)
            if listing is None:
                raise page_not_found(request.path)
            return _json(encode(listing))
        route = resource_route(group, version, rest)
        if route is None:
            raise page_not_found(request.path)
        if route.subresource and route.subresource not in route.resource.subresources:
            raise page_not_found(request.path)
        if self.faults.latency:
            await asyncio.sleep(self.faults.latency)
        fault = self.faults.request_error(
            request.method, route.resource, route.name, route.namespace
        )
        if fault is not None:
            raise fault
        if is_true(request.query.get("watch")):
            return await self._serve(request, route)
        drop = self.faults.request_drop()
        if drop == "before":
            cut(request)
        response = await self._serve(request, route)
        if drop == "after":
            cut(request)
        return response

    async def _serve(self, request: web.BaseRequest, route: Route) -> web.StreamResponse:
        method = request.method
        if not route.name:
            if method == "GET":
                if is_true(request.query.get("watch")):
                    return await self._watch(request, route)
                return self._list(request, route)
            if method == "POST" and (route.namespace or not route.resource.namespaced):
                return await self._create(request, route)
            if method == "DELETE" and (route.namespace or not route.resource.namespaced):
                return await self._delete_collection(request, route)
            raise method_not_allowed()
        if route.subresource in ("binding", "eviction"):
            if method != "POST":
                raise method_not_allowed()
            body = await self._body(request)
            if route.subresource == "binding":
                self.registry.bind(route.namespace, route.name, body)
                return _success({}, 201)
            self.registry.evict(route.namespace, route.name, body)
            return _success({"name": route.name, "kind": "pods"}, 201)
        if method == "GET":
            if is_true(request.query.get("watch")):
                raise method_not_allowed()
            stored = self.registry.get(route.resource, route.namespace, route.name)
            version = tables.table_version(request.headers.get("Accept", ""))
            if version is not None:
                meta = {"resourceVersion": stored.obj["metadata"]["resourceVersion"]}
                return self._table(request, route, [stored.obj], meta, version)
            return _json(stored.data)
        if method == "PUT":
            fields = _field_validation(request, "UpdateOptions")
            body = await self._body(request)
            stored = self.registry.update(
                route.resource,
                route.namespace,
                route.name,
                body,
                subresource=route.subresource,
                dry_run=_dry_run(request),
                fields=fields,
            )
            return _written(stored.data or encode(stored.obj), fields)
        if method == "PATCH":
            return await self._patch(request, route)
        if method == "DELETE" and not route.subresource:
            return await self._delete(request, route)
        raise method_not_allowed()

    async def _body(self, request: web.BaseRequest) -> Any:
        raw = await request.read()
        content_type = request.content_type
        if content_type in ("application/yaml", "application/apply-patch+yaml"):
            yaml = _yaml()
            if yaml is None:
                raise unsupported_media_type(content_type, (JSON,))
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise bad_request(f"couldn't get version/kind; yaml parse error: {exc}") from None
        if content_type.startswith("application/vnd.kubernetes.protobuf"):
            raise unsupported_media_type(content_type, (JSON, "application/yaml"))
        if not raw.strip():
            return {}
        try:
            return decode(raw)
        except msgspec.DecodeError as exc:
            raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    def _list(self, request: web.BaseRequest, route: Route) -> web.Response:
        query = request.query
        resource = route.resource
        predicate = combine(
            label_selector(query.get("labelSelector")),
            field_selector(query.get("fieldSelector"), resource.kind),
        )
        limit = _int_param(query, "limit") or 0
        if limit < 0:
            raise bad_request(f"invalid limit: {limit}")
        token = query.get("continue")
        rv_param = _int_param(query, "resourceVersion")
        if rv_param is not None and rv_param > self.store.rv:
            raise _too_large(rv_param, self.store.rv)
        after = ""
        at_rv = self.store.rv
        if token:
            at_rv, after = decode_continue(token)
        elif rv_param and query.get("resourceVersionMatch") == "Exact":
            at_rv = rv_param
        try:
            items, last = self.store.page(
                resource, route.namespace or None, predicate, after=after, limit=limit, at_rv=at_rv
            )
        except Expired:
            if token:
                raise expired(_CONTINUE_TOO_OLD) from None
            raise expired(
                f"too old resource version: {at_rv} ({self.store.table(resource).floor})"
            ) from None
        metadata: dict[str, Any] = {"resourceVersion": str(at_rv)}
        if last is not None:
            metadata["continue"] = encode_continue(at_rv, last)
        version = tables.table_version(request.headers.get("Accept", ""))
        if version is not None:
            return self._table(request, route, [decode(item) for item in items], metadata, version)
        head = encode(
            {"kind": resource.list_kind, "apiVersion": resource.api_version, "metadata": metadata}
        )
        body = head[:-1] + b',"items":[' + b",".join(items) + b"]}"
        return _json(body)

    def _table(
        self,
        request: web.BaseRequest,
        route: Route,
        objects: list[dict[str, Any]],
        metadata: dict[str, Any],
        version: str,
    ) -> web.Response:
        include = tables.include_object(request.query)
        now = self.store.clock()
        table = tables.table(
            route.resource, objects, metadata, now=now, include=include, version=version
        )
        return _json(encode(table))

    async def _watch(self, request: web.BaseRequest, route: Route) -> web.StreamResponse:
        query = request.query
        resource = route.resource
        predicate = combine(
            label_selector(query.get("labelSelector")),
            field_selector(query.get("fieldSelector"), resource.kind),
        )
        send_initial = is_true(query.get("sendInitialEvents"))
        rv_text = query.get("resourceVersion")
        since: int | None = None
        if rv_text not in (None, "", "0") and not send_initial:
            since = _int_param(query, "resourceVersion")
            if since is not None and since > self.store.rv:
                raise _too_large(since, self.store.rv)
        timeout = _int_param(query, "timeoutSeconds")
        spec = WatchRequest(
            resource=resource,
            namespace=route.namespace or None,
            predicate=predicate,
            since=since,
            # 0 means "the server's default", as for the real server.
            timeout=float(timeout) if timeout else self.watch_timeout,
            bookmarks=is_true(query.get("allowWatchBookmarks")),
            initial_events_end=send_initial,
        )
        return await serve_watch(request, self.store, self.faults, spec, self.bookmark_seconds)

    async def _create(self, request: web.BaseRequest, route: Route) -> web.Response:
        fields = _field_validation(request, "CreateOptions")
        body = await self._body(request)
        stored = self.registry.create(
            route.resource, route.namespace, body, dry_run=_dry_run(request), fields=fields
        )
        return _written(stored.data or encode(stored.obj), fields, 201)

    async def _patch(self, request: web.BaseRequest, route: Route) -> web.Response:
        fields = _field_validation(request, "PatchOptions")
        content_type = request.content_type
        if content_type == APPLY_PATCH:
            raise unsupported_media_type(
                content_type,
                (
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ),
            )
        raw = await request.read()
        try:
            body = decode(raw) if raw.strip() else None
        except msgspec.DecodeError as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        if body is None:
            raise bad_request("the patch body is empty")
        stored = self.registry.patch(
            route.resource,
            route.namespace,
            route.name,
            content_type,
            body,
            subresource=route.subresource,
            dry_run=_dry_run(request),
            fields=fields,
        )
        return _written(stored.data or encode(stored.obj), fields)

    async def _delete(self, request: web.BaseRequest, route: Route) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        options = delete_options(body, dict(request.query))
        result = self.registry.delete(route.resource, route.namespace, route.name, options)
        code = 200 if result.deleted else 202
        if (
            route.resource.kind in ("Pod", "Namespace", "Service", "JobSet", "Node")
            or not result.deleted
        ):
            return _json(encode(result.obj), code)
        meta = result.obj["metadata"]
        details = {"name": meta["name"], "kind": route.resource.plural, "uid": meta["uid"]}
        if route.resource.group:
            details["group"] = route.resource.group
        return _success(details, code)

    async def _delete_collection(self, request: web.BaseRequest, route: Route) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        options = delete_options(body, dict(request.query))
        query = request.query
        predicate = combine(
            label_selector(query.get("labelSelector")),
            field_selector(query.get("fieldSelector"), route.resource.kind),
        )
        targets = [
            s.obj["metadata"]
            for s in self.store.iter_objects(route.resource, route.namespace or None)
            if predicate is None or predicate(s.obj)
        ]
        for meta in targets:
            with contextlib.suppress(ApiError):
                self.registry.delete(
                    route.resource, meta.get("namespace", ""), meta["name"], options
                )
        head = encode(
            {
                "kind": route.resource.list_kind,
                "apiVersion": route.resource.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
            }
        )
        return _json(head[:-1] + b',"items":[]}')


def cut(request: web.BaseRequest) -> None:
    """End the request's connection without an answer (the `drop-request` fault)."""
    if request.transport is not None:
        request.transport.abort()
    raise ConnectionResetError("injected fault: connection cut without an answer")


def _too_large(requested: int, current: int) -> ApiError:
    """A version from the future (e.g. from another incarnation of the cluster): the real
    server waits a few seconds for it, then gives up like this."""
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def _dry_run(request: web.BaseRequest) -> bool:
    return bool(request.query.get("dryRun"))


def _accepted_versions(accept: str) -> set[str]:
    versions = set()
    for part in accept.split(","):
        if "g=apidiscovery.k8s.io" not in part:
            continue
        for param in part.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "v":
                versions.add(value)
    return versions
