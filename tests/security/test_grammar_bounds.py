"""Structured-output schemas cannot amplify into enormous grammars."""

from __future__ import annotations

import time
from typing import Any

import pytest

from skulk_core.chat.tools import ToolSpec
from skulk_daemon.chat.grammars import (
    MAX_GRAMMAR_BYTES,
    MAX_SCHEMA_REPETITION,
    GrammarTooLarge,
    json_schema_grammar,
    tool_call_grammar,
)

pytestmark = pytest.mark.xdist_group("timing")

HOSTILE: list[dict[str, Any]] = [
    {"type": "string", "minLength": 50_000_000},
    {"type": "string", "maxLength": 1_000_000_000},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1e9},
    {"type": "array", "maxItems": MAX_SCHEMA_REPETITION + 1},
    {"type": "object", "minProperties": 10**7},
    {"type": "string", "pattern": "^(ab){1,100000}$"},
    {"type": "string", "pattern": "^a{7000}$"},
    {"type": "object", "properties": {"deep": {"type": "string", "minLength": 10**8}}},
]


@pytest.mark.parametrize("schema", HOSTILE)
def test_hostile_bounds_are_refused_at_once(schema: dict[str, Any]) -> None:
    started = time.monotonic()
    with pytest.raises(GrammarTooLarge):
        json_schema_grammar(schema)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("schema", HOSTILE[:3])
def test_a_forced_tool_with_hostile_bounds_is_refused_not_relaxed(schema: dict[str, Any]) -> None:
    with pytest.raises(GrammarTooLarge):
        tool_call_grammar([ToolSpec(name="f", parameters=schema)])


def test_bounds_at_the_limit_are_served_and_the_grammar_stays_small() -> None:
    grammar = json_schema_grammar(
        {"type": "array", "items": {"type": "integer"}, "minItems": MAX_SCHEMA_REPETITION}
    )
    assert len(grammar) <= MAX_GRAMMAR_BYTES
    assert json_schema_grammar({"type": "string", "maxLength": MAX_SCHEMA_REPETITION})


def test_many_bounded_fields_together_hit_the_grammar_bound() -> None:
    wide = {
        "type": "object",
        "properties": {
            f"f{i}": {"type": "array", "items": {"type": "integer"}, "minItems": 4000}
            for i in range(8)
        },
    }
    with pytest.raises(GrammarTooLarge):
        json_schema_grammar(wide)


def _nested(depth: int, **bounds: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, **bounds}
    return schema


@pytest.mark.parametrize(
    "schema",
    [
        _nested(300, minItems=MAX_SCHEMA_REPETITION),
        _nested(300, maxItems=MAX_SCHEMA_REPETITION),
        # Rule names grow with every level's property name, too.
        {
            "type": "object",
            "properties": {
                "k" * 30_000: {
                    "type": "array",
                    "items": {"enum": [1]},
                    "minItems": MAX_SCHEMA_REPETITION,
                }
            },
        },
    ],
)
def test_nesting_cannot_multiply_a_small_schema(schema: dict[str, Any]) -> None:
    started = time.monotonic()
    with pytest.raises(GrammarTooLarge, match="nesting"):
        json_schema_grammar(schema)
    assert time.monotonic() - started < 0.5


def test_modest_nesting_is_still_served() -> None:
    assert len(json_schema_grammar(_nested(40, minItems=2, maxItems=3))) <= MAX_GRAMMAR_BYTES
