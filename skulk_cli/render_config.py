"""What `skulk config show` and `skulk config set` print."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.config_edit import SECRET_KEYS
from skulk_cli.views import ConfigResponse

# The effective values the in-effect rows already show (under their own keys).
_SHOWN_AS_ROWS = frozenset({"kv_cache_backend", "models_dir", "data_dir", "in_effect"})
_SOURCE_STYLES = {"flag": "bold cyan", "env": "bold magenta", "file": "green", "default": "dim"}


def format_value(value: object) -> str:
    """A config value as `skulk config set` would take it: strings bare, the rest JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def flatten(document: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """Nested sections as ``(dotted.key, value)`` pairs, in document order."""
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{path}.")
        else:
            yield path, value


def config(response: ConfigResponse) -> RenderableType:
    """The config file as the dotted keys `skulk config set` takes, then what is in
    effect on the node: each value with where it came from, and a file value the node
    is not running with yet."""
    file_values = dict(flatten(response.config))
    settings = Table(
        "Key", "Value", title=f"Config: {response.path or 'skulk.yaml'}", title_justify="left"
    )
    for key, value in file_values.items():
        settings.add_row(key, format_value(value))
    rows = response.in_effect
    if not response.effective:
        return settings
    effective = Table(
        "Setting",
        "Value",
        "From",
        title="In effect on this node (flag > env > skulk.yaml > default)",
        title_justify="left",
    )
    for row in rows:
        value = Text(format_value(row.value) if row.value is not None else "-")
        note = _note(row.source, row.value, file_values.get(row.key))
        if note:
            value.append(f"  {note}", style="yellow")
        effective.add_row(row.key, value, Text(row.source, _SOURCE_STYLES.get(row.source, "")))
    for key, value in flatten(response.effective):
        if rows and key.split(".")[0] in _SHOWN_AS_ROWS:
            continue
        effective.add_row(key, format_value(value), "")
    return Group(settings, effective)


def _note(source: str, value: object, in_file: object) -> str:
    if in_file is None or in_file == value:
        return ""
    if source in ("flag", "env"):
        return f"(skulk.yaml: {format_value(in_file)})"
    return f"(skulk.yaml now says {format_value(in_file)}: `skulk restart` applies it)"


def config_change(key: str, old: object, new: object, *, existed: bool) -> Text:
    """What `skulk config set` changed; secrets are named, never shown."""
    if key in SECRET_KEYS:
        return Text.assemble("Set ", (key, "bold"), " (value hidden).")
    text = Text.assemble("Set ", (key, "bold"), " to ", (format_value(new), "bold green"))
    if existed:
        text.append(f" (was {format_value(old)})")
    return text
