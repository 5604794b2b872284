"""No key, token or pairing secret in any log a test run writes.

Every secret a test hands a daemon (a ``*_KEY``/``*_TOKEN``/``*_SECRET`` environment
variable) and every credential a test obtains at run time (pairing nonces, access and
refresh tokens, relay credentials) is registered here. At the end of the session
:func:`findings` reads every daemon log the run wrote, and every log record emitted in
the test process, and names each place a registered secret appears. The session fails
on any finding (see ``tests/conftest.py``).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Final

# Shorter values are not secrets worth hunting for (and would match by accident).
MIN_SECRET_LENGTH: Final = 12
_SECRET_NAME: Final = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)S?$")
# Records kept to check against secrets registered after them; beyond this the oldest go.
MAX_RECORDS: Final = 200_000

_secrets: dict[str, str] = {}
_logs: list[Path] = []
_records: list[str] = []


def register(label: str, *values: object) -> None:
    """Remember ``values`` (strings or credential dicts) as secrets named ``label``."""
    for value in values:
        match value:
            case str() if len(value) >= MIN_SECRET_LENGTH:
                _secrets.setdefault(value, label)
            case dict():
                for key, inner in value.items():
                    if isinstance(inner, str) and _is_secret_field(str(key)):
                        register(f"{label}.{key}", inner)
            case _:
                pass


def _is_secret_field(name: str) -> bool:
    return bool(re.search(r"(token|nonce|secret|credential|key)$", name, re.IGNORECASE))


def register_environment(env: dict[str, str]) -> None:
    """The secret-named variables of a daemon's environment (comma lists split)."""
    for name, value in env.items():
        if name.startswith(("SKULK_", "HF_")) and _SECRET_NAME.search(name):
            register(name, *value.split(","))


def watch_log(path: Path) -> None:
    if path not in _logs:
        _logs.append(path)


class RecordSniffer(logging.Handler):
    """Keeps each record's rendered text (message and traceback) for the final check."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format is not our concern
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += f"\n{record.exc_info[1]!r}"
        _records.append(text)
        if len(_records) > MAX_RECORDS:
            del _records[: MAX_RECORDS // 10]


def findings() -> list[str]:
    """Where a registered secret appears: ``"<log>: <label>"`` each, sorted."""
    found: set[str] = set()
    for path in _logs:
        if not path.exists():
            continue
        text = path.read_text(errors="replace")
        found.update(f"{path}: {label}" for value, label in _secrets.items() if value in text)
    records = "\n".join(_records)
    found.update(
        f"a log record of the test process: {label}"
        for value, label in _secrets.items()
        if value in records
    )
    return sorted(found)
