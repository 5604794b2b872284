"""How the CLI turns an option's text into its value, without pydantic where it can.

Typer 0.29 coerces every option and argument that is not a flag through a pydantic
``TypeAdapter``, built when the command runs, before it looks at the value: for an
option left out and for the help flag too. For `skulk status` that imported pydantic
and built three adapters, about a third of the command's CPU. The values the
commands take are plain: a string, an int or a float (in a range, or clamped to
one), a choice, a path, a list of those. Here they are coerced by the rules Typer's
adapters apply (with Typer's own helpers for choices and path checks), and only when
the answer is certain: a value this cannot vouch for (a malformed or out-of-range
number, a choice not offered, a date, any other type) goes to Typer's own adapter,
so what the user sees, error wording included, stays Typer's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import typer.core
from typer._click.core import Context
from typer._coercion import (
    RuntimeParam,
    TypeDescriptor,
    build_runtime_param,
    resolve_type_descriptor,
)
from typer._param_types import coerce_cli_choice, coerce_cli_path
from typer._typing import get_args
from typer.models import ParameterInfo

_UNSURE: Final = object()
"""A value the plain coercion leaves to Typer's adapter."""

Coerce = Callable[[Any, Any, Context | None], Any]
"""``(value, param, ctx)`` to the value, or :data:`_UNSURE`."""


@dataclass(frozen=True)
class PlainRuntimeParam(RuntimeParam):
    """A parameter coerced in plain Python; Typer's adapter is built (and pydantic
    imported) only for a value the plain coercion leaves to it."""

    descriptor: TypeDescriptor
    fast: Coerce
    _stock: list[RuntimeParam] = field(default_factory=list)

    def _coerce_value(self, value: Any, param: typer.core._TyperParameter, ctx: Context) -> Any:
        result = self.fast(value, param, ctx)
        if result is not _UNSURE:
            return result
        if not self._stock:
            self._stock.append(build_runtime_param(self.descriptor))
        return self._stock[0]._coerce_value(value, param=param, ctx=ctx)


def runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
    """What Typer builds for a parameter, plain where :func:`plain_coercion` applies.

    NOTE: Typer builds a parameter's adapter before it looks at the value, even for
    an option left out (None) and for the help flag; here nothing is built for them.
    """
    if descriptor.is_file:
        return build_runtime_param(descriptor)  # opens files; builds no adapter
    return PlainRuntimeParam(
        annotation=descriptor.annotation,
        parameter_info=descriptor.parameter_info,
        descriptor=descriptor,
        fast=plain_coercion(descriptor),
    )


def plain_coercion(descriptor: TypeDescriptor) -> Coerce:
    """The plain coercion for a parameter's type. Follows the order of Typer's
    ``build_adapter``; a type it does not know leaves every value to Typer."""
    info = descriptor.parameter_info
    annotation = descriptor.annotation
    if info.parser is not None or descriptor.is_tuple or descriptor.is_datetime:
        return _unsure
    if descriptor.is_list:
        (item,) = get_args(annotation)
        return _items(plain_coercion(resolve_type_descriptor(item, info)))
    choices = descriptor.choices
    if choices is not None:
        return _choice(choices, case_sensitive=info.case_sensitive)
    if annotation is int or annotation is float:
        return _number(annotation, info.min, info.max, clamp=bool(info.clamp))
    if annotation is bool:
        return _flag
    if annotation is str:
        return _string
    if descriptor.is_path:
        return _path(info.path_type or annotation, info)
    return _unsure  # dates, UUIDs, anything else


def _unsure(_value: Any, _param: Any, _ctx: Context | None) -> Any:
    return _UNSURE


def _flag(value: Any, _param: Any, _ctx: Context | None) -> Any:
    # Typer's adapter reads text ("yes", "0") for a bool; a flag already is one.
    return value if type(value) is bool else _UNSURE


def _string(value: Any, _param: Any, _ctx: Context | None) -> Any:
    # Typer's adapter: str(value) for anything but bytes, then str validation.
    return value if type(value) is str else _UNSURE


def _items(item: Coerce) -> Coerce:
    """A list option: each value as its item type reads it, as a list."""

    def coerce(value: Any, param: Any, ctx: Context | None) -> Any:
        if not isinstance(value, (list, tuple)):
            return _UNSURE
        items = []
        for one in value:
            read = item(one, param, ctx)
            if read is _UNSURE:
                return _UNSURE  # Typer's adapter reads the whole list again
            items.append(read)
        return items

    return coerce


def _choice(choices: Sequence[Any], *, case_sensitive: bool) -> Coerce:
    def coerce(value: Any, _param: Any, ctx: Context | None) -> Any:
        try:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
        except ValueError:
            return _UNSURE  # Typer's adapter words the refusal

    return coerce


def _path(path_type: Any, info: ParameterInfo) -> Coerce:
    """Typer's path checks (exists, file or directory, ...), which are plain Python;
    only its str-to-Path step is pydantic's, and for a path that is ``Path(text)``."""

    def coerce(value: Any, param: Any, ctx: Context | None) -> Any:
        if path_type in (None, str, bytes) or isinstance(value, path_type):
            return coerce_cli_path(value, info, path_type=path_type, param=param, ctx=ctx)
        # "-" (stdin) and "" read differently as text and as a Path: Typer's, as is
        # anything but plain text for a plain Path.
        if path_type is not Path or type(value) is not str or value in ("", "-") or "\0" in value:
            return _UNSURE
        # Checked as text (no path type: text in, text out), then made the Path.
        checked = coerce_cli_path(value, info, path_type=None, param=param, ctx=ctx)
        return Path(os.fsdecode(checked))

    return coerce


def _number(
    kind: type[int] | type[float], low: float | None, high: float | None, *, clamp: bool
) -> Coerce:
    def coerce(value: Any, _param: Any, _ctx: Context | None) -> Any:
        text = type(value) is str and _decimal(value, fraction=kind is float)
        # A default given in the code: an int, or a float for a float option.
        given = type(value) is int or (kind is float and type(value) is float)
        if not (text or given):
            return _UNSURE
        number = kind(value)
        if clamp:
            if low is not None and number < low:
                return kind(low)
            if high is not None and number > high:
                return kind(high)
            return number
        if (low is not None and number < low) or (high is not None and number > high):
            return _UNSURE  # Typer's adapter words the bound
        return number

    return coerce


def _decimal(text: str, *, fraction: bool) -> bool:
    """Whether ``text`` is canonical decimal: an optional minus, digits without a
    leading zero, and (``fraction``) an optional ``.digits``. Anything else
    (whitespace, underscores, exponents, "inf") is left to Typer's adapter."""
    whole, dot, part = text.removeprefix("-").partition(".")
    if dot and not (fraction and _digits(part, 15)):
        return False
    return _digits(whole, 15 if fraction else 18) and (whole == "0" or whole[0] != "0")


def _digits(text: str, most: int) -> bool:
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


def install() -> None:
    """Coerce every Typer parameter through :func:`runtime_param` (idempotent)."""
    setattr(typer.core, "build_runtime_param", runtime_param)  # noqa: B010 (a patched module global)
