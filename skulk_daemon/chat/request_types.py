"""Request pieces the wire formats share, and the conversions they all use.

Each adapter decodes its body into typed Structs, so msgspec does the checking.
What msgspec cannot say on its own lives here, once:

- a refusal with a code other than ``invalid_request`` (``tool_choice`` is refused
  as ``invalid_tool_choice``): :func:`field_errors` converts a field at the point
  the adapter reads it and names the code;
- fields that have always been lenient about a wrong JSON type (a tool whose
  ``description`` is not a string keeps working, the description is dropped):
  they are typed ``object`` and read through :func:`optional_text`. A request
  accepted once stays accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, TypeVar

import msgspec

from skulk_core.chat.tools import NamedChoice, ToolChoice, ToolSpec
from skulk_daemon.errors import bad_request

P = TypeVar("P")

_json = msgspec.json.Encoder()
_PATH_MARK = " - at `$"


def optional_text(value: object) -> str | None:
    """A lenient string field: any other JSON value is ignored, not refused."""
    return value if isinstance(value, str) else None


def json_text(value: object) -> str:
    """Function-call arguments as JSON text: a string already is; a value is encoded."""
    return value if isinstance(value, str) else _json.encode(value).decode()


def one_or_many(value: str | Sequence[P] | None, wrap: Callable[[str], P]) -> tuple[P, ...]:
    """A field that is a string or a list (``stop``, content as text or parts)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (wrap(value),)
    return tuple(value)


def _rooted(message: str, at: str) -> str:
    """A msgspec message whose path is relative to the converted value, rooted at
    ``at`` so it reads like :func:`skulk_daemon.errors.decode_json`'s."""
    head, mark, tail = message.rpartition(_PATH_MARK)
    if not mark:
        return f"{message}{_PATH_MARK}.{at}`"
    return f"{head}{_PATH_MARK}.{at}{tail}"


@contextmanager
def field_errors(
    at: str, code: str = "invalid_request", message: str | None = None
) -> Iterator[None]:
    """Turn a :class:`msgspec.ValidationError` raised converting the field at ``at``
    (``"tools[0]"``, ``"text.format"``) into a 400 with ``code``, naming the path
    (or saying ``message`` instead, where a fixed explanation is clearer)."""
    try:
        yield
    except msgspec.ValidationError as exc:
        raise bad_request(message or f"invalid request: {_rooted(str(exc), at)}", code) from None


def tool_spec(name: str, description: object, parameters: object, *, at: str) -> ToolSpec:
    """A function tool; ``parameters`` (at ``at``) absent, null or empty means no schema."""
    with field_errors(at):
        schema: dict[str, object] = msgspec.convert(parameters or {}, dict[str, object])
    return ToolSpec(name=name, description=optional_text(description), parameters=schema)


# --- tool_choice (Chat Completions and Responses accept each other's form) ---------

ToolChoiceMode = Literal["auto", "none", "required"]


class FunctionName(msgspec.Struct, frozen=True, kw_only=True):
    name: str


class FunctionChoice(msgspec.Struct, frozen=True, kw_only=True):
    """Chat Completions' ``{"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"]
    function: FunctionName


class FlatFunctionChoice(msgspec.Struct, frozen=True, kw_only=True):
    """The Responses API's ``{"type": "function", "name": ...}``."""

    type: Literal["function"]
    name: str


def tool_choice(raw: str | dict[str, object] | None, *, refusal: str) -> ToolChoice | None:
    """``tool_choice`` as a mode or a named function, in either form; anything else is
    a 400 ``invalid_tool_choice`` saying ``refusal``.

    The body keeps the field free-form (a string or an object) so that this refusal
    keeps its own code; the forms are tried in order, each ignoring the other's keys.
    """
    if raw is None:
        return None
    with field_errors("tool_choice", "invalid_tool_choice", refusal):
        try:
            choice: ToolChoiceMode | FunctionChoice = msgspec.convert(
                raw, ToolChoiceMode | FunctionChoice
            )
        except msgspec.ValidationError:
            flat: FlatFunctionChoice = msgspec.convert(raw, FlatFunctionChoice)
            return NamedChoice(flat.name)
    match choice:
        case FunctionChoice(function=function):
            return NamedChoice(function.name)
        case "auto" | "none" | "required":
            return choice
