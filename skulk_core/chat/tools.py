"""Function tools: what a request offers, what ``tool_choice`` means, what came back.

Every wire format (Chat Completions, Responses, Claude, Ollama) turns its tool
fields into these types, so ``tool_choice`` means the same thing everywhere:

- ``none`` removes the tools, the only way to be sure the model calls none;
- a named function narrows the offer to that one tool;
- a name matching none of the tools, or a name forced with no tools at all, is
  refused (the caller's choice cannot be honoured, and any answer would be a guess);
- ``auto`` and ``required`` pass through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ToolMode = Literal["auto", "required", "named"]


class ToolChoiceError(ValueError):
    """``tool_choice`` cannot be honoured with the tools offered."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One function the caller offers; ``parameters`` is its JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made: ``arguments`` is a JSON object, as text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolOffer:
    """The tools a generation may call, after ``tool_choice`` has been applied."""

    tools: tuple[ToolSpec, ...] = ()
    mode: ToolMode = "auto"

    @property
    def names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools)


NO_TOOLS = ToolOffer()


@dataclass(frozen=True, slots=True)
class NamedChoice:
    name: str


ToolChoice = Literal["auto", "required", "none"] | NamedChoice


def resolve_tool_choice(tools: tuple[ToolSpec, ...], choice: ToolChoice | None) -> ToolOffer:
    """Apply ``choice`` to ``tools`` as the module docstring says; raises
    :class:`ToolChoiceError` when the choice cannot be honoured."""
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ToolChoiceError("tool names must be unique")
    match choice:
        case None | "auto":
            return ToolOffer(tools=tools, mode="auto") if tools else NO_TOOLS
        case "none":
            return NO_TOOLS
        case "required":
            if not tools:
                raise ToolChoiceError('tool_choice "required" needs at least one tool')
            return ToolOffer(tools=tools, mode="required")
        case NamedChoice(name=name):
            if not tools:
                raise ToolChoiceError(f"tool_choice names {name!r} but no tools were offered")
            chosen = [tool for tool in tools if tool.name == name]
            if not chosen:
                offered = ", ".join(repr(n) for n in names)
                raise ToolChoiceError(
                    f"tool_choice names {name!r}, which matches none of the tools ({offered})"
                )
            return ToolOffer(tools=(chosen[0],), mode="named")
