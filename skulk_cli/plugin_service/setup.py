"""The service root and its setup record, and the connection record the host reads.

::

    <service root>/                 owner-only (0700)
      setup.json                    the setup record (profile id, phase, runtime, TLS CA)
      manager/                      the manager's root (its socket, installations)
      runtimes/                     the staged manager runtimes and the ``current`` link

The service root is ``--root``, else ``SKULK_PLUGIN_SERVICE_ROOT``, else, where a system
service manager runs, the durable system service root (``registration.py``), else
``~/.local/share/skulk-plugin-service``; the connection record goes to
``SKULK_CONFIG_HOME/managed-service/connection.json``
(``skulk_host.plugin_manager.connection``). Rerunning setup keeps the generated profile
id; a different configuration home bound to the same root is refused rather than
rebound.

Setup stages a sealed copy of this Skulk environment under ``runtimes/``
(``staging.py``) and records it (``runtime: "staged"``, the ``generation`` and its
``seal_sha256``); the service runs ``runtimes/current/bin/python -I -S -B
runtimes/current/bootstrap.py serve --root <manager root> --sealed-runtime`` (the
bootstrap verifies the seal before site initialisation, then runs
``skulk.extensions.runtime_manager``), so a ``reload_runtime`` that moves ``current``
restarts it on another generation. Records written before staging existed read as
``runtime: "live_environment"``.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Final, Literal

import msgspec

from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_host.files import atomic_write
from skulk_host.fsutil import ensure_private_dir
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from skulk_host.plugin_service.runtime import (
    CURRENT_LINK,
    Completion,
    current_bootstrap,
    generation_dir,
    runtimes,
    selected,
    verify,
)

ROOT_ENV: Final = "SKULK_PLUGIN_SERVICE_ROOT"
DEFAULT_ROOT: Final = ".local/share/skulk-plugin-service"
SETUP_FILE: Final = "setup.json"
MANAGER_DIR: Final = "manager"

Phase = Literal["preparing", "staged", "selected", "registered", "ready"]
Runtime = Literal["live_environment", "staged"]
ServiceKind = Literal["systemd", "launchd", "none"]


class SetupRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    operation_id: str
    profile_id: str
    phase: Phase
    config_home: str
    runtime: Runtime = "live_environment"
    python: str
    """The interpreter the manager runs on (``runtimes/current/bin/python`` when staged)."""
    generation: str | None = None
    seal_sha256: str | None = None
    build_sha256: str | None = None
    tls_ca: str | None = None
    service: ServiceKind = "none"
    updated_at: int


def service_root(explicit: Path | None, system_default: Path | None = None) -> Path:
    """``--root``, else the environment, else the platform's durable system service root
    (``system_default``, where a service manager runs), else the per-user default."""
    if explicit is not None:
        return explicit.expanduser().absolute()
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).expanduser().absolute()
    if system_default is not None:
        return system_default
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


def _private_dir(path: Path) -> None:
    """``path`` owner-only (0700), created if missing, tightened if it was not."""
    ensure_private_dir(path)
    path.chmod(0o700)


def prepare(root: Path, config_home: Path, tls_ca: Path | None) -> SetupRecord:
    """The root, the manager root and the connection record; idempotent."""
    if root.is_symlink():
        raise refuse("source_invalid", "The service root must not be a symbolic link.")
    _private_dir(root)
    _private_dir(manager_root(root))
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
    if previous is not None:
        record = msgspec.structs.replace(
            record,
            runtime=previous.runtime,
            python=previous.python,
            generation=previous.generation,
            seal_sha256=previous.seal_sha256,
            build_sha256=previous.build_sha256,
        )
    write_record(root, record)
    write_connection(
        config_home,
        ManagerConnection(manager_root=str(manager_root(root)), profile_id=record.profile_id),
    )
    return record


def staged_python(root: Path) -> Path:
    """The selected generation's interpreter, through the ``current`` link."""
    return runtimes(root) / CURRENT_LINK / "bin" / "python"


def record_staged(root: Path, record: SetupRecord, completion: Completion) -> SetupRecord:
    """The record after staging: a new operation unless this generation was already the
    recorded one (a rerun over an unchanged source)."""
    same = record.generation == completion.generation
    return write_record(
        root,
        msgspec.structs.replace(
            record,
            operation_id=record.operation_id if same else secrets.token_hex(16),
            phase="staged",
            runtime="staged",
            python=str(staged_python(root)),
            generation=completion.generation,
            seal_sha256=completion.seal_sha256,
            build_sha256=completion.build_sha256,
            updated_at=int(time.time()),
        ),
    )


def runtime_verified(root: Path, record: SetupRecord | None) -> bool:
    """Read-only: the recorded generation is the selected one and matches its seal."""
    if record is None or record.runtime != "staged" or record.generation is None:
        return False
    try:
        verify(generation_dir(root, record.generation), record.seal_sha256)
    except PluginRefusal:
        return False
    return selected(root) == record.generation


def serve_command(record: SetupRecord, root: Path) -> list[str]:
    """The fixed manager command this setup runs (in the foreground or as a service): a
    staged runtime starts through its bootstrap (``-I -S -B``), which verifies the seal
    before anything of it is imported."""
    staged = record.runtime == "staged"
    if staged:
        entry = ["-I", "-S", "-B", str(current_bootstrap(root))]
    else:
        entry = ["-m", "skulk.extensions.runtime_manager"]
    command = [record.python, *entry, "serve", "--root", str(manager_root(root))]
    if staged:
        command.append("--sealed-runtime")
    if record.tls_ca is not None:
        command += ["--tls-ca", record.tls_ca]
    return command
