"""JSON Schemas for values as :func:`skulk_core.wire.to_wire` renders them.

``to_wire`` writes a Struct the way msgspec encodes it, with one difference: a tagged
Struct becomes a single-key object, ``{"RunnerReady": {...its fields}}``, where msgspec
puts the tag inside (``{"type": "RunnerReady", ...}``). So these schemas are msgspec's,
rewritten for that difference: each tagged Struct's schema is wrapped under its tag,
and the discriminators that pointed at the inner tag field are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import msgspec.inspect as mi

SchemaHook = Callable[[type], dict[str, Any]]


def wire_schema_components(
    types: Iterable[Any], *, schema_hook: SchemaHook, ref_template: str
) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """Like :func:`msgspec.json.schema_components`, for ``to_wire``'s rendering."""
    types = tuple(types)
    refs, components = msgspec.json.schema_components(
        types, schema_hook=schema_hook, ref_template=ref_template
    )
    tagged = _tagged_structs(types)
    for name, schema in components.items():
        for struct in tagged:
            if _describes(schema, struct):
                components[name] = _externally_tagged(schema, struct)
                break
    return refs, {name: _without_discriminators(schema) for name, schema in components.items()}


def _tagged_structs(types: tuple[Any, ...]) -> list[mi.StructType]:
    found: list[mi.StructType] = []
    seen: set[type] = set()
    pending: list[object] = list(mi.multi_type_info(types))
    while pending:
        node = pending.pop()
        if isinstance(node, mi.StructType):
            if node.cls in seen:
                continue
            seen.add(node.cls)
            if node.tag is not None:
                found.append(node)
            pending.extend(field.type for field in node.fields)
        elif isinstance(node, mi.Type):
            for field in msgspec.structs.fields(node):
                value = getattr(node, field.name)
                pending.extend(value if isinstance(value, tuple) else (value,))
    return found


def _describes(schema: dict[str, Any], struct: mi.StructType) -> bool:
    tag_field = struct.tag_field or ""
    return schema.get("title") == struct.cls.__name__ and schema.get("properties", {}).get(
        tag_field
    ) == {"enum": [struct.tag]}


def _externally_tagged(schema: dict[str, Any], struct: mi.StructType) -> dict[str, Any]:
    tag_field = struct.tag_field
    inner = {key: value for key, value in schema.items() if key not in ("title", "description")}
    inner["properties"] = {k: v for k, v in schema["properties"].items() if k != tag_field}
    inner["required"] = [name for name in schema.get("required", []) if name != tag_field]
    tag = str(struct.tag)
    wrapped: dict[str, Any] = {"title": schema["title"]}
    if "description" in schema:
        wrapped["description"] = schema["description"]
    wrapped |= {
        "type": "object",
        "properties": {tag: inner},
        "required": [tag],
        "additionalProperties": False,
    }
    return wrapped


def _without_discriminators(value: Any) -> Any:
    if isinstance(value, dict):
        union = "anyOf" in value or "oneOf" in value
        return {
            key: _without_discriminators(item)
            for key, item in value.items()
            if not (union and key == "discriminator")
        }
    if isinstance(value, list):
        return [_without_discriminators(item) for item in value]
    return value
