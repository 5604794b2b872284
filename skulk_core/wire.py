"""JSON wire rendering for State-shaped values.

Skulk clients parse tagged unions as single-key objects (``{"RunnerReady": {}}``),
camelCase keys, ISO-8601 times. msgspec tags internally, so this walks the value
once and wraps every tagged Struct by its tag. Internal (msgpack) encoding for the
event log and the fabric keeps msgspec's native tagging.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import Enum

import msgspec

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


def to_wire(value: object) -> JsonValue:
    """Render a Struct tree into JSON-ready builtins, externally tagging tagged unions."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        body: dict[str, JsonValue] = {}
        for field in msgspec.structs.fields(value):
            item = getattr(value, field.name)
            if config.omit_defaults and is_default_field(item, field):
                continue
            body[field.encode_name] = to_wire(item)
        tag = config.tag
        if tag is not None:
            return {str(tag): body}
        return body
    if isinstance(value, Enum):
        return to_wire(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_wire(v) for v in value]
    result: JsonValue = msgspec.to_builtins(value)
    return result


def is_default_field(item: object, field: msgspec.structs.FieldInfo) -> bool:
    """Whether ``item`` equals the field's declared default (what ``omit_defaults`` drops)."""
    if field.default is not msgspec.NODEFAULT:
        return bool(item == field.default)
    if field.default_factory is not msgspec.NODEFAULT:
        return bool(item == field.default_factory())
    return False
