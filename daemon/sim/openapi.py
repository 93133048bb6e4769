"""OpenAPI v3 schemas of the served kinds, for `kubectl explain` (and any client that reads
`/openapi/v3`): built from `shapes`, the same field knowledge the decoder and
`fieldValidation` use, so what is documented is what is accepted.

`openapi_docs.json` lists the fields that carry a description (the kinds' top-level fields and
the main nested types), with short descriptions of our own; a field without one is still
listed with its type. The Kubernetes API reference is where their meaning is documented.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from daemon.sim.resources import Resource
from daemon.sim.shapes import FreeMap, Shape, Struct, object_shape

_DOCS: Final[dict[str, dict[str, str]]] = json.loads(
    (Path(__file__).parent / "openapi_docs.json").read_text()
)
_TYPES: Final = {str: "string", int: "integer", float: "number", bool: "boolean"}
_REF: Final = "#/components/schemas/"


def definition_name(resource: Resource) -> str:
    """The kind's schema name as the real server spells it (`io.k8s.api.batch.v1.Job`)."""
    if not resource.group:
        return f"io.k8s.api.core.v1.{resource.kind}"
    if resource.group.endswith(".k8s.io") or "." not in resource.group:
        return f"io.k8s.api.{resource.group.split('.')[0]}.{resource.version}.{resource.kind}"
    return ".".join(reversed(resource.group.split("."))) + f".{resource.version}.{resource.kind}"


def _described(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, **schema} if description else schema


class _Builder:
    """Collects the named types a document's kinds reach, each defined once."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def field(self, shape: Shape, description: str) -> dict[str, Any]:
        if isinstance(shape, Struct) and shape.name:
            self.struct(shape.name, shape)
            # The real documents wrap a reference this way so that it can carry a description.
            return _described({"allOf": [{"$ref": _REF + shape.name}]}, description)
        return _described(self.inline(shape), description)

    def inline(self, shape: Shape) -> dict[str, Any]:
        if isinstance(shape, Struct):
            return self.object_schema("", shape)
        if isinstance(shape, list):
            return {"type": "array", "items": self.field(shape[0], "")}
        if isinstance(shape, FreeMap):
            values = _TYPES.get(shape.values[0], "string")
            return {"type": "object", "additionalProperties": {"type": values}}
        if shape is dict:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": _TYPES[shape]}

    def object_schema(self, name: str, shape: Struct) -> dict[str, Any]:
        docs = _DOCS.get(name, {})
        common = _DOCS["_object"] if "metadata" in shape and "apiVersion" in shape else {}
        properties = {
            key: self.field(sub, docs.get(key) or common.get(key, ""))
            for key, sub in sorted(shape.items())
        }
        return _described({"type": "object", "properties": properties}, docs.get("", ""))

    def struct(self, name: str, shape: Struct) -> None:
        if name not in self.schemas:
            self.schemas[name] = {}  # a placeholder first: a type may reach itself
            self.schemas[name] = self.object_schema(name, shape)


def schemas(served: list[Resource]) -> dict[str, Any]:
    """`components.schemas` of a group-version document serving `served`."""
    builder = _Builder()
    for resource in served:
        shape = object_shape(resource.kind, resource.group)
        if shape is None:
            continue
        name = definition_name(resource)
        schema = builder.object_schema(name, shape)
        gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        builder.schemas[name] = {**schema, "x-kubernetes-group-version-kind": [gvk]}
    return builder.schemas
