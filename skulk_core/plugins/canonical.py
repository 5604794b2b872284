"""Canonical JSON: the exact bytes a plugin signature, digest or fence is taken over.

The one canonical form the spec defines (the card digest's): sorted keys, compact
separators (``,`` and ``:``), ASCII escapes, and no non-finite numbers. Signed plugin
documents also refuse floats altogether, so two encoders can never disagree on the
bytes of a number; every bound, time and size in them is an integer.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

MAX_DEPTH: Final = 32
"""Nesting deeper than this is not a plugin document (and would only cost stack)."""


class NotCanonical(ValueError):
    """The value cannot be written canonically (a float, a non-string key, too deep)."""


def _check(value: object, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise NotCanonical(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        raise NotCanonical("a signed plugin document carries integers, never floats")
    if isinstance(value, list | tuple):
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonical("object keys must be strings")
            _check(item, depth + 1)
        return
    raise NotCanonical(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: object) -> bytes:
    """The canonical bytes of ``value`` (JSON types only; ints, never floats)."""
    _check(value, 0)
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return text.encode("ascii")


def canonical_sha256(value: object) -> str:
    """Lowercase hex SHA-256 of :func:`canonical_json` of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
