"""JSON Schemas for values as :func:`skulk_core.wire.to_wire` renders them.

``to_wire`` writes a Struct the way msgspec encodes it, with one difference: a tagged
Struct becomes a single-key object, ``{"RunnerReady": {...its fields}}``, where msgspec
puts the tag inside (``{"type": "RunnerReady", ...}``). So these schemas are msgspec's,
rewritten for that difference: each tagged Struct's schema is wrapped under its tag,
and the discriminators that pointed at the inner tag field are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec
import msgspec.inspect as mi

SchemaHook = Callable[[type], dict[str, object]]


def wire_schema_components(
    types: Iterable[object], *, schema_hook: SchemaHook, ref_template: str
) -> tuple[tuple[dict[str, object], ...], dict[str, dict[str, object]]]:
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


def _tagged_structs(types: tuple[object, ...]) -> list[mi.StructType]:
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


def _describes(schema: Mapping[str, object], struct: mi.StructType) -> bool:
    tag_field = struct.tag_field or ""
    properties = schema.get("properties", {})
    return (
        schema.get("title") == struct.cls.__name__
        and isinstance(properties, dict)
        and properties.get(tag_field) == {"enum": [struct.tag]}
    )


def _externally_tagged(schema: Mapping[str, object], struct: mi.StructType) -> dict[str, object]:
    # NOTE: only called on a schema _describes matched, so ``properties`` is an object;
    # msgspec writes ``required`` as a list of names.
    tag_field = struct.tag_field
    properties, required = schema["properties"], schema.get("required", [])
    assert isinstance(properties, dict) and isinstance(required, list)
    inner = {key: value for key, value in schema.items() if key not in ("title", "description")}
    inner["properties"] = {k: v for k, v in properties.items() if k != tag_field}
    inner["required"] = [name for name in required if name != tag_field]
    tag = str(struct.tag)
    wrapped: dict[str, object] = {"title": schema["title"]}
    if "description" in schema:
        wrapped["description"] = schema["description"]
    wrapped |= {
        "type": "object",
        "properties": {tag: inner},
        "required": [tag],
        "additionalProperties": False,
    }
    return wrapped


def _without_discriminators(schema: Mapping[str, object]) -> dict[str, object]:
    union = "anyOf" in schema or "oneOf" in schema
    return {
        key: _stripped(item)
        for key, item in schema.items()
        if not (union and key == "discriminator")
    }


def _stripped(value: object) -> object:
    """``value`` with the discriminators of every schema inside it dropped."""
    if isinstance(value, dict):
        return _without_discriminators(value)
    if isinstance(value, list):
        return [_stripped(item) for item in value]
    return value
