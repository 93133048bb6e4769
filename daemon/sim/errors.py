"""API errors as the real server shapes them: `Status` objects with reason, code and details.

Clients branch on `reason` and `code` and humans read `message`, so both follow the wording
of the real API server (apimachinery `errors.New*` and `field.Error`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec


class _Omit:
    """`field.OmitValueType`: an invalid-value error whose value is not worth printing."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT = _Omit()


@dataclass(frozen=True, slots=True)
class FieldError:
    """One `field.Error`: the path, its type (`FieldValueInvalid`, ...) and the text."""

    path: str
    reason: str
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    def message(self) -> str:
        """The cause message without the path, as the real server writes it."""
        if self.reason == "FieldValueRequired":
            text = "Required value"
            return f"{text}: {self.detail}" if self.detail else text
        if self.reason == "FieldValueForbidden":
            return f"Forbidden: {self.detail}" if self.detail else "Forbidden"
        if self.reason == "FieldValueNotSupported":
            quoted = ", ".join(f'"{s}"' for s in self.supported)
            return f"Unsupported value: {_render(self.value)}: supported values: {quoted}"
        if self.reason == "FieldValueDuplicate":
            return f"Duplicate value: {_render(self.value)}"
        if self.reason == "FieldValueTooLong":
            return f"Too long: {self.detail}"
        if self.value is OMIT:
            return f"Invalid value: {self.detail}"
        text = f"Invalid value: {_render(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text


def _render(value: Any) -> str:
    try:
        text = msgspec.json.encode(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "FieldValueInvalid", detail, value)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "FieldValueRequired", detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, "FieldValueForbidden", detail)


def not_supported(path: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    return FieldError(path, "FieldValueNotSupported", value=value, supported=supported)


def immutable(path: str, value: Any) -> FieldError:
    return invalid(path, value, "field is immutable")


@dataclass
class ApiError(Exception):
    """An error answered to the client as a `Status` object."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = self.details
        return status


def qualified(plural: str, group: str) -> str:
    """`pods` or `jobs.batch`: how messages name a resource."""
    return f"{plural}.{group}" if group else plural


def _details(plural: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(plural, group)} "{name}" not found',
        _details(plural, group, name),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        _details(plural, group, name),
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        _details(plural, group, name),
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid_object(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid listing every field error, like `errors.NewInvalid`."""
    qualified_kind = f"{kind}.{group}" if group else kind
    parts = [f"{e.path}: {e.message()}" for e in errors]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [
        {"reason": e.reason, "message": e.message(), "field": e.path} for e in errors
    ]
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message, {})


def unsupported_media_type(content_type: str, accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
        {"causes": [{"reason": "UnexpectedServerResponse", "message": content_type}]}
        if content_type
        else {},
    )


def page_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_many_requests(retry_after: int) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
        {
            "causes": [{"reason": "UnexpectedServerResponse", "message": "unknown"}],
            "retryAfterSeconds": retry_after,
        },
        {"Retry-After": str(retry_after)},
    )


def internal_error(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )
