"""Whether a route's answer Struct carries what the manager answered exactly."""

from __future__ import annotations

import msgspec


def answered(result: object, answer: type[object]) -> bool:
    """``result`` decoded as ``answer`` and encoded again is the same JSON text: the
    same keys, in the same order, with the same values (what a client of the route sees
    is what the manager said)."""
    return msgspec.json.encode(msgspec.convert(result, answer)) == msgspec.json.encode(result)
