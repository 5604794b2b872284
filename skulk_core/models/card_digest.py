"""The card digest: a content binding for one exact card (not a signature).

SHA-256 over the card's JSON with snake_case names, sorted keys, compact
separators, ASCII escapes and no non-finite floats, excluding only
``registry_snapshot_id`` (a new signed snapshot does not change the card).
``GET /models/requirements``, ``/v1/models`` and instance previews all use it, so a
controller can tell that the card it approved is the card that will run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final, TypeAlias

import msgspec

from skulk_core.models.cards import ModelCard
from skulk_core.wire import is_default_field

DIGEST_EXCLUDED_FIELDS: Final = frozenset({"registry_snapshot_id"})

_Json: TypeAlias = "bool | int | float | str | list[_Json] | dict[str, _Json] | None"


def card_digest(card: ModelCard) -> str:
    """Hex SHA-256 of the card's canonical JSON."""
    document = _snake_builtins(card, exclude=DIGEST_EXCLUDED_FIELDS)
    canonical = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _snake_builtins(value: object, *, exclude: frozenset[str] = frozenset()) -> _Json:
    # NOTE: fields still at their default are left out wherever the struct's own
    # wire encoding (``omit_defaults``) leaves them out. The digest therefore binds
    # the card's content, and adding an optional field to ModelCard in a later
    # release does not change the digest of every existing card.
    if isinstance(value, msgspec.Struct):
        omit_defaults = value.__struct_config__.omit_defaults
        out: dict[str, _Json] = {}
        for field in msgspec.structs.fields(value):
            if field.name in exclude:
                continue
            item = getattr(value, field.name)
            if omit_defaults and is_default_field(item, field):
                continue
            out[field.name] = _snake_builtins(item)
        return out
    if isinstance(value, list | tuple):
        return [_snake_builtins(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _snake_builtins(item) for key, item in value.items()}
    builtin: _Json = msgspec.to_builtins(value)
    return builtin
