"""The service root and its setup record, and the connection record the host reads.

::

    <service root>/                 owner-only (0700)
      setup.json                    the setup record (profile id, phase, runtime, TLS CA)
      manager/                      the manager's root (its socket, installations)

The service root is ``--root``, else ``SKULK_PLUGIN_SERVICE_ROOT``, else
``~/.local/share/skulk-plugin-service``; the connection record goes to
``SKULK_CONFIG_HOME/managed-service/connection.json`` (``wire.py``). Rerunning
setup keeps the generated profile id; a different configuration home bound to the
same root is refused rather than rebound.

The manager runs from this Skulk environment (``runtime: "live_environment"``): a
separately staged, sealed copy of the runtime is not built yet, and the record says
so instead of claiming a ``staged`` phase.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Final, Literal

import msgspec

from skulk_cli.plugin_service.wire import Connection, atomic_write, private_dir, write_connection
from skulk_core.plugins.errors import refuse

ROOT_ENV: Final = "SKULK_PLUGIN_SERVICE_ROOT"
DEFAULT_ROOT: Final = ".local/share/skulk-plugin-service"
SETUP_FILE: Final = "setup.json"
MANAGER_DIR: Final = "manager"

Phase = Literal["preparing", "selected", "registered", "ready"]
ServiceKind = Literal["systemd", "launchd", "none"]


class SetupRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    operation_id: str
    profile_id: str
    phase: Phase
    config_home: str
    runtime: Literal["live_environment"] = "live_environment"
    python: str
    tls_ca: str | None = None
    service: ServiceKind = "none"
    updated_at: int


def service_root(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit.expanduser().absolute()
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).expanduser().absolute()
    return Path.home() / DEFAULT_ROOT


def manager_root(root: Path) -> Path:
    return root / MANAGER_DIR


def read_record(root: Path) -> SetupRecord | None:
    path = root / SETUP_FILE
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=SetupRecord)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise refuse("malformed", f"The setup record {SETUP_FILE} cannot be read.") from None


def write_record(root: Path, record: SetupRecord) -> SetupRecord:
    atomic_write(root / SETUP_FILE, msgspec.json.encode(record))
    return record


def prepare(root: Path, config_home: Path, tls_ca: Path | None) -> SetupRecord:
    """The root, the manager root and the connection record; idempotent."""
    if root.is_symlink():
        raise refuse("source_invalid", "The service root must not be a symbolic link.")
    private_dir(root)
    private_dir(manager_root(root))
    previous = read_record(root)
    config = str(config_home.absolute())
    if previous is not None and previous.config_home != config:
        raise refuse(
            "source_invalid",
            f"This service root is bound to the Skulk configuration {previous.config_home}; "
            "it is not rebound to another one.",
        )
    if tls_ca is not None and not tls_ca.is_file():
        raise refuse("malformed", "--tls-ca must name a CA certificate file.")
    record = SetupRecord(
        operation_id=previous.operation_id if previous else secrets.token_hex(16),
        profile_id=previous.profile_id if previous else secrets.token_hex(16),
        phase="preparing",
        config_home=config,
        python=sys.executable,
        tls_ca=str(tls_ca.absolute()) if tls_ca else (previous.tls_ca if previous else None),
        updated_at=int(time.time()),
    )
    write_record(root, record)
    write_connection(
        config_home,
        Connection(manager_root=str(manager_root(root)), profile_id=record.profile_id),
    )
    return write_record(root, msgspec.structs.replace(record, phase="selected"))


def serve_command(record: SetupRecord, root: Path) -> list[str]:
    """The fixed manager command this setup runs (in the foreground or as a service)."""
    command = [
        record.python,
        "-m",
        "skulk.extensions.runtime_manager",
        "serve",
        "--root",
        str(manager_root(root)),
    ]
    if record.tls_ca is not None:
        command += ["--tls-ca", record.tls_ca]
    return command
