"""How both CLIs' help names what an option or argument takes.

Typer 0.29's rich help prints a flag's type as `<bool>` (`--json <bool>`), which reads
as if the flag took a value, and a valued option's Python type (`--runner <str>`,
`--seconds <float range>`), which says nothing to an operator. Here a flag shows no
value; a plain value is named after its option, as git does (`--runner <runner>`); an
argument, already shown by its name (MODEL), shows no plain type; choices, paths and
dates keep Typer's label. :func:`install` wraps Typer's classes once, for every command
of `skulk` and `skulk-plugin-service` and for the man pages.
"""

from __future__ import annotations

from typer._click.core import Context as ClickContext
from typer.core import TyperArgument, TyperOption

_option_type = TyperOption.display_type_rich
_argument_type = TyperArgument.display_type_rich


def _value_label(self: TyperOption, ctx: ClickContext) -> str | None:
    if self.metavar is not None:
        return _option_type(self, ctx)
    if self.is_flag:
        return None
    kind = self.type_descriptor
    if kind.is_choice or kind.is_path or kind.is_datetime or kind.is_tuple or not self.name:
        return _option_type(self, ctx)
    return f"<{self.name.replace('_', '-')}>"


def _argument_label(self: TyperArgument, ctx: ClickContext) -> str | None:
    kind = self.type_descriptor
    if kind.is_choice or kind.is_path or kind.is_datetime or kind.is_tuple:
        return _argument_type(self, ctx)
    return None


def install() -> None:
    """Patch Typer's help labels (idempotent: the originals are kept above)."""
    setattr(TyperOption, "display_type_rich", _value_label)  # noqa: B010 (a method, patched once)
    setattr(TyperArgument, "display_type_rich", _argument_label)  # noqa: B010 (as above)
