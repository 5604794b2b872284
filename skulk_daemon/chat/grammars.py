"""GBNF grammars for structured output: JSON mode, JSON Schema, forced tool calls.

llama.cpp's sampler enforces a GBNF grammar token by token, so an answer under a
schema grammar cannot violate the schema. The JSON-Schema-to-GBNF converter is
llama-cpp-python's (a port of llama.cpp's own ``json_schema_to_grammar``).

NOTE: the converter module is pure Python, but importing it as
``llama_cpp.llama_grammar`` would run the package's ``__init__`` and load
libllama into the API process, which only runners should do. It is loaded by
file path instead, once.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Protocol

from skulk_core.chat.tools import ToolSpec

MAX_SCHEMA_BYTES = 64 * 1024
"""A schema larger than this is refused: its grammar would be enormous."""
MAX_SCHEMA_REPETITION = 4096
"""The largest ``minLength``/``maxLength``/``minItems``/``maxItems``/``minProperties``/
``maxProperties`` and regex ``{n,m}`` count a schema may ask for. The converter spells a
repetition out rule by rule, so the grammar grows with the count: ``minLength: 50000000``
once took the API 1.7 s and a quarter of a gigabyte."""
MAX_GRAMMAR_BYTES = 256 * 1024
"""A grammar larger than this is refused (it travels in every request to the runner).

The bound holds while the grammar is built, not only once it is: the converter names
each nested rule after its parents, so a repetition's size is its count times a name
that grows with depth (300 nested arrays of 4096 items once made 937 MB from 12.5 KB).
Every repetition is sized before it is spelled out and every rule is counted as it is
added, so a refusal costs at most about this many bytes."""

_COUNTED = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_REGEX_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


class GrammarError(ValueError):
    """A schema that cannot become a grammar; the message is for the client."""


class GrammarTooLarge(GrammarError):
    """A schema whose bounds would make an enormous grammar (never silently relaxed)."""


@functools.cache
def _converter() -> ModuleType:
    """llama-cpp-python's converter module, bounded (see :data:`MAX_GRAMMAR_BYTES`).

    NOTE: this module object is Skulk's own copy, loaded by path, so rebinding its
    ``_build_repetition`` bounds every repetition it spells out (arrays, strings,
    regex quantifiers) without touching the ``llama_cpp`` package anyone else imports.
    """
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise GrammarError("structured output needs llama-cpp-python, which is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "llama_grammar.py"
    module_spec = importlib.util.spec_from_file_location("_skulk_llama_grammar", path)
    if module_spec is None or module_spec.loader is None:
        raise GrammarError("llama-cpp-python's grammar converter could not be found")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    build = module._build_repetition
    module._build_repetition = _bounded_repetition(build)  # type: ignore[attr-defined]
    return module


def _bounded_repetition(build: Callable[..., str]) -> Callable[..., str]:
    def bounded(
        item_rule: str,
        min_items: int,
        max_items: int | None,
        separator_rule: str | None = None,
        item_rule_is_literal: bool = False,
    ) -> str:
        count = max(min_items, max_items or 0)
        # Each repetition spells the item (and separator) once, with a few bytes of
        # grouping: an upper bound within a small factor of what ``build`` makes.
        size = count * (len(item_rule) + len(separator_rule or "") + 6)
        if size > MAX_GRAMMAR_BYTES:
            raise GrammarTooLarge(_too_large(size))
        return build(item_rule, min_items, max_items, separator_rule, item_rule_is_literal)

    return bounded


def _too_large(size: int) -> str:
    return (
        f"the JSON schema's grammar would be at least {size} bytes, more than the "
        f"{MAX_GRAMMAR_BYTES} allowed; ask for smaller lengths, fewer items or less nesting"
    )


class _Converter(Protocol):
    """The part of llama-cpp-python's ``SchemaConverter`` this module drives."""

    def resolve_refs(self, schema: object, url: str) -> object: ...
    def visit(self, schema: object, name: str) -> str: ...
    def format_grammar(self) -> str: ...


class _ConverterClass(Protocol):
    def __call__(
        self, *, prop_order: dict[str, int], allow_fetch: bool, dotall: bool, raw_pattern: bool
    ) -> _Converter: ...


@functools.cache
def _bounded_converter() -> _ConverterClass:
    """The converter's ``SchemaConverter``, refusing once its rules pass the bound."""

    class BoundedConverter(_converter().SchemaConverter):  # type: ignore[misc]
        size = 0

        def _add_rule(self, name: str, rule: str) -> str:
            rules = len(self._rules)
            key: str = super()._add_rule(name, rule)
            if len(self._rules) > rules:  # the same rule added again costs nothing
                self.size += len(key) + len(rule) + 5
                if self.size > MAX_GRAMMAR_BYTES:
                    raise GrammarTooLarge(_too_large(self.size))
            return key

    return BoundedConverter


def _json_schema_to_gbnf(text: str) -> str:
    """What the converter's ``json_schema_to_gbnf`` does, under the bound."""
    converter = _bounded_converter()(
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    converter.visit(converter.resolve_refs(json.loads(text), "stdin"), "")
    return converter.format_grammar()


def json_object_grammar() -> str:
    """Any JSON object (OpenAI's ``json_object`` mode, Ollama's ``format: "json"``)."""
    grammar: str = _converter().JSON_GBNF
    return grammar


def json_schema_grammar(schema: dict[str, object]) -> str:
    """A grammar whose every sentence is a JSON document valid under ``schema``.

    Remote ``$ref``\\ s are never fetched: the converter resolves local ones only
    and refuses the rest.
    """
    text = json.dumps(schema)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise GrammarTooLarge(f"the JSON schema is larger than {MAX_SCHEMA_BYTES} bytes")
    _refuse_remote_refs(schema)
    _refuse_large_counts(schema)
    try:
        grammar = _json_schema_to_gbnf(text)
    except GrammarError:
        raise
    except (ValueError, KeyError, TypeError, AssertionError, RecursionError) as exc:
        raise GrammarError(f"the JSON schema cannot be enforced: {exc}") from None
    except Exception as exc:  # the converter raises bare Exceptions for unsupported forms
        raise GrammarError(f"the JSON schema cannot be enforced: {exc}") from None
    if len(grammar) > MAX_GRAMMAR_BYTES:
        raise GrammarTooLarge(_too_large(len(grammar)))
    return grammar


def _refuse_large_counts(node: object) -> None:
    if isinstance(node, dict):
        for key in _COUNTED:
            value = node.get(key)
            if isinstance(value, int | float) and value > MAX_SCHEMA_REPETITION:
                raise GrammarTooLarge(
                    f"{key} {value:g} is more than the {MAX_SCHEMA_REPETITION} a schema may ask for"
                )
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            for match in _REGEX_COUNT.finditer(pattern):
                counts = [int(group) for group in match.groups() if group]
                if any(count > MAX_SCHEMA_REPETITION for count in counts):
                    raise GrammarTooLarge(
                        f"the pattern repeats {match.group(0)} times, more than the "
                        f"{MAX_SCHEMA_REPETITION} a schema may ask for"
                    )
        for value in node.values():
            _refuse_large_counts(value)
    elif isinstance(node, list):
        for value in node:
            _refuse_large_counts(value)


def _refuse_remote_refs(node: object) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            raise GrammarError(f"remote $ref {ref!r} is not supported; inline the definition")
        for value in node.values():
            _refuse_remote_refs(value)
    elif isinstance(node, list):
        for value in node:
            _refuse_remote_refs(value)


def tool_call_grammar(tools: Sequence[ToolSpec]) -> str:
    """A grammar for one call to one of ``tools``, written the way Skulk's tool
    prompt asks: ``{"name": ..., "arguments": {...}}`` with arguments under the
    tool's own schema (any object, where that schema cannot be enforced)."""
    options = []
    for tool in tools:
        parameters: dict[str, object] = tool.parameters or {"type": "object"}
        try:
            json_schema_grammar(parameters)
        except GrammarTooLarge:
            raise
        except GrammarError:
            parameters = {"type": "object"}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, object] = options[0] if len(options) == 1 else {"oneOf": options}
    return json_schema_grammar(schema)
