"""Registering the manager as a service of this user, where a service manager runs.

Linux with a working ``systemctl --user``: a user unit
``~/.config/systemd/user/skulk-plugin-manager.service`` (``Restart=always``), enabled
and started. macOS: a launchd agent ``~/Library/LaunchAgents/
foundation.foxlight.skulk.plugins.plist`` (``KeepAlive``), bootstrapped into the
user's GUI domain. Anywhere else, or when the service manager does not answer (a
container, a session without a user bus), :func:`detect` says so in a sentence and
nothing is registered: the caller offers the foreground manager instead.

These are per-user services (no ``sudo``); the spec's system-wide units are not built.
The command registered is setup's ``serve_command``: the staged runtime's interpreter
through the ``runtimes/current`` link, so the keep-alive restarts a manager that stopped
after ``reload_runtime`` on the newly selected generation.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from skulk_cli.plugin_service.setup import ServiceKind
from skulk_core.files import atomic_write

UNIT_NAME: Final = "skulk-plugin-manager.service"
LAUNCHD_LABEL: Final = "foundation.foxlight.skulk.plugins"
PROBE_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class Detected:
    kind: ServiceKind
    reason: str
    """Why no service manager can be used (empty when one can)."""


def _run(*command: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            list(command), capture_output=True, text=True, timeout=PROBE_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def detect() -> Detected:
    if sys.platform == "darwin":
        if shutil.which("launchctl") is None:
            return Detected("none", "launchctl is not available on this host")
        return Detected("launchd", "")
    if sys.platform.startswith("linux"):
        if shutil.which("systemctl") is None:
            return Detected("none", "systemd is not installed on this host (no systemctl)")
        probe = _run("systemctl", "--user", "is-system-running")
        state = probe.stdout.strip() if probe is not None else ""
        if probe is None or state not in ("running", "degraded", "starting"):
            return Detected(
                "none",
                "systemctl --user does not answer here (no running systemd user manager"
                + (f": {state}" if state else "")
                + ")",
            )
        return Detected("systemd", "")
    return Detected("none", f"no supported service manager on {sys.platform}")


def systemd_unit(command: list[str]) -> str:
    return (
        "[Unit]\nDescription=Skulk local plugin manager\n\n"
        f"[Service]\nExecStart={shlex.join(command)}\nRestart=always\nRestartSec=5\n\n"
        "[Install]\nWantedBy=default.target\n"
    )


def register(kind: ServiceKind, command: list[str]) -> str | None:
    """Write and start the service; ``None`` on success, else what failed."""
    match kind:
        case "systemd":
            unit = Path.home() / ".config/systemd/user" / UNIT_NAME
            unit.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(unit, systemd_unit(command).encode(), mode=0o644)
            # NOTE: restart, not enable --now: a service already running on the previous
            # runtime generation is stopped and started on the selected one.
            for step in (("daemon-reload",), ("enable", UNIT_NAME), ("restart", UNIT_NAME)):
                done = _run("systemctl", "--user", *step)
                if done is None or done.returncode != 0:
                    return f"systemctl --user {' '.join(step)} failed"
            return None
        case "launchd":
            plist = Path.home() / "Library/LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
            plist.parent.mkdir(parents=True, exist_ok=True)
            body = {"Label": LAUNCHD_LABEL, "ProgramArguments": command, "KeepAlive": True}
            atomic_write(plist, plistlib.dumps(body), mode=0o644)
            uid = str(os.getuid())
            _run("launchctl", "bootout", f"gui/{uid}", str(plist))
            done = _run("launchctl", "bootstrap", f"gui/{uid}", str(plist))
            if done is None or done.returncode != 0:
                return "launchctl bootstrap failed"
            return None
        case "none":
            return "no service manager"
