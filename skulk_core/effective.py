"""The settings a node runs with and where each came from: ``GET /config``'s
``effective.in_effect`` rows (the daemon resolves them at start)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final

import msgspec

# Keys whose value is a path on the node's host: blanked for a caller that may not see them.
PATH_KEYS: Final = frozenset({"paths.config", "paths.data_dir", "paths.models_dir", "logging.file"})


class Source(StrEnum):
    """Where a setting's value came from, in precedence order."""

    FLAG = "flag"
    ENV = "env"
    FILE = "file"
    DEFAULT = "default"


SettingValue = str | int | bool | list[str] | None


class EffectiveSetting(msgspec.Struct, frozen=True, kw_only=True):
    """One setting as the node runs with it: ``key``, ``value`` and its ``source``."""

    key: str
    value: SettingValue
    source: Source


def hide_paths(rows: tuple[EffectiveSetting, ...], hidden: str) -> tuple[EffectiveSetting, ...]:
    """``rows`` with every host path replaced by ``hidden``, for a public caller."""
    return tuple(
        msgspec.structs.replace(row, value=hidden) if row.key in PATH_KEYS else row for row in rows
    )
