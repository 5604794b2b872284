"""The steward's tool surface and the JSON Schema each investigation step obeys.

A step is one JSON object, ``{"tool": <name>, "arguments": {...}}``, or
``{"tool": "answer"}`` once the evidence suffices. The daemon turns :func:`step_schema`
into a llama.cpp grammar, so even a small base model can only emit a call the server
can run: a known tool, with its arguments' exact shape, and a node name that is one of
the live friendly names (never an id, never an invented one).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

MAX_TOOL_CALLS: Final = 8
"""Tool calls in one turn, the harness's baseline ``get_cluster_state`` included."""
MAX_TOOL_RESULT_CHARS: Final = 2000
"""Every tool result is cut to this many characters (with a marker) before the model
or the trace sees it."""
MAX_QUERY_CHARS: Final = 80
ANSWER: Final = "answer"


class StewardTool(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    arguments: tuple[str, ...] = ()
    """The argument names, each a string (``node_name``, ``query``, ``model_id``)."""
    proposal: bool = False


READ_TOOLS: Final = (
    StewardTool(
        name="get_cluster_state",
        description="nodes, model instances and their status, downloads, the master",
    ),
    StewardTool(name="get_node_resources", description="memory, CPU and accelerator per node"),
    StewardTool(
        name="get_telemetry", description="node health, telemetry age and data-plane transport"
    ),
    StewardTool(name="get_version_status", description="Skulk version and commit of every node"),
    StewardTool(
        name="get_performance_envelopes",
        description="measured throughput and latency envelopes per model",
    ),
    StewardTool(
        name="get_node_diagnostics",
        description="one named node's complete diagnostic bundle",
        arguments=("node_name",),
    ),
    StewardTool(
        name="run_doctor", description="one named node's doctor findings", arguments=("node_name",)
    ),
    StewardTool(name="get_model_catalog", description="the models this cluster can serve"),
    StewardTool(
        name="get_capability_nodes",
        description="extension capability advertisements, owners and bundle versions",
    ),
    StewardTool(
        name="search_docs",
        description="search Skulk's own documentation",
        arguments=("query",),
    ),
)

PROPOSAL_TOOLS: Final = (
    StewardTool(
        name="place_model",
        description="propose placing a model (an operator must approve)",
        arguments=("model_id", "rationale"),
        proposal=True,
    ),
    StewardTool(
        name="stop_model",
        description="propose stopping a model's running instance (an operator must approve)",
        arguments=("model_id", "rationale"),
        proposal=True,
    ),
    StewardTool(
        name="restart_model",
        description="propose restarting a model's instance (an operator must approve)",
        arguments=("model_id", "rationale"),
        proposal=True,
    ),
    StewardTool(
        name="cancel_download",
        description="propose cancelling a model download on a named node (an operator must "
        "approve)",
        arguments=("node_name", "model_id", "rationale"),
        proposal=True,
    ),
)


def tool_surface(*, proposals: bool) -> tuple[StewardTool, ...]:
    """The read tools, plus the inert proposal tools for operator-authority requests."""
    return READ_TOOLS + PROPOSAL_TOOLS if proposals else READ_TOOLS


class _Schema(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The subset of JSON Schema a step uses (what llama.cpp's grammar builder reads)."""


class StringSchema(
    _Schema,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    rename="camel",
    tag_field="type",
    tag="string",
):
    """A string argument (``type`` is written as the tag, unset bounds are left out)."""

    enum: tuple[str, ...] | None = None
    min_length: int | None = None
    max_length: int | None = None


class ConstSchema(_Schema, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    const: str


class ObjectSchema(
    _Schema,
    frozen=True,
    kw_only=True,
    omit_defaults=False,
    rename="camel",
    tag_field="type",
    tag="object",
):
    """A closed object: every field is written, since the grammar needs
    ``additionalProperties: false`` said."""

    properties: dict[str, StringSchema | ConstSchema | ObjectSchema]
    required: tuple[str, ...]
    additional_properties: bool = False


class AnyOfSchema(_Schema, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    any_of: tuple[ObjectSchema, ...]


def _argument_schema(
    name: str, node_names: tuple[str, ...], model_ids: tuple[str, ...]
) -> StringSchema:
    if name == "node_name":
        return StringSchema(enum=node_names) if node_names else StringSchema(max_length=64)
    if name == "model_id":
        return StringSchema(enum=model_ids) if model_ids else StringSchema(max_length=128)
    if name == "rationale":
        return StringSchema(min_length=1, max_length=160)
    return StringSchema(min_length=1, max_length=MAX_QUERY_CHARS)


def _closed(properties: dict[str, StringSchema | ConstSchema | ObjectSchema]) -> ObjectSchema:
    """An object with exactly these properties, all required."""
    return ObjectSchema(properties=properties, required=tuple(properties))


def step_schema(
    tools: tuple[StewardTool, ...],
    node_names: tuple[str, ...],
    model_ids: tuple[str, ...],
    *,
    allow_answer: bool = True,
    called: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The JSON Schema of one step: exactly one of the tools (or ``answer``), with its
    arguments. Names and ids are enums of what exists now, so a call cannot name a
    node or model the evidence does not contain. A tool without arguments already in
    ``called`` is left out: calling it again would add no evidence. Built from the
    typed schema Structs above, returned as the JSON document the grammar reads."""
    choices: list[ObjectSchema] = []
    if allow_answer:
        choices.append(_closed({"tool": ConstSchema(const=ANSWER)}))
    for tool in tools:
        if not tool.arguments and tool.name in called:
            continue
        if not node_names and "node_name" in tool.arguments:
            continue  # nothing to name: the tool cannot be called
        arguments = _closed({a: _argument_schema(a, node_names, model_ids) for a in tool.arguments})
        choices.append(_closed({"tool": ConstSchema(const=tool.name), "arguments": arguments}))
    document: dict[str, Any] = msgspec.json.decode(
        msgspec.json.encode(AnyOfSchema(any_of=tuple(choices)))
    )
    return document


def bounded(text: str, limit: int = MAX_TOOL_RESULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    marker = f" …[cut: {len(text) - limit} more characters]"
    return text[: limit - len(marker)] + marker
