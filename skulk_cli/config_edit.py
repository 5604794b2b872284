"""Pure edits of a skulk.yaml document by dotted key, for `skulk config set`."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass

# Never echoed back: the node keeps them and GET /config never shows them either.
SECRET_KEYS = frozenset({"hf_token", "cluster.key"})


class ConfigKeyError(ValueError):
    """The key cannot name a setting in this document."""


@dataclass(frozen=True)
class ConfigEdit:
    document: dict[str, object]
    old: object
    existed: bool


def parse_value(text: str) -> object:
    """A command-line value: JSON when it parses as JSON, otherwise the text itself.

    ``true``, ``false``, ``null``, numbers, ``["a", "b"]`` and ``{"k": 1}`` become
    typed values; anything else (``debug``, ``q8_0``) stays a string, and a quoted
    ``'"true"'`` is the string ``true``. JSON rather than YAML on purpose: YAML 1.1
    would quietly turn ``no`` or ``on`` into booleans.
    """

    def refuse_constant(name: str) -> object:
        raise ValueError(name)  # NaN and Infinity are not JSON; keep them as text

    try:
        value: object = json.loads(text, parse_constant=refuse_constant)
    except ValueError:
        return text
    return value


def set_path(document: Mapping[str, object], key: str, value: object) -> ConfigEdit:
    """A copy of ``document`` with ``key`` (``section.name``) set to ``value``.

    Missing sections are created, so the node, not the CLI, decides which keys
    exist; a key that runs through a plain value is refused here.
    """
    parts = key.split(".")
    if not all(parts):
        raise ConfigKeyError(f"'{key}' is not a dotted key like logging.level")
    result = copy.deepcopy(dict(document))
    section: dict[str, object] = result
    for depth, part in enumerate(parts[:-1]):
        child = section.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigKeyError(f"'{where}' is a setting, not a section, so '{key}' cannot exist")
        section = child
    leaf = parts[-1]
    existed = leaf in section
    old = section.get(leaf)
    section[leaf] = value
    return ConfigEdit(document=result, old=old, existed=existed)
