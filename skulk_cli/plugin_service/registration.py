"""Registering the manager as a system service, where a system service manager runs.

Linux with a running systemd (``systemctl is-system-running``): a system unit
``/etc/systemd/system/foundation.foxlight.skulk.plugins.u<uid>.service`` running as the
owner's numeric ``User=``, from the durable root ``/var/lib/skulk-plugin-services/<uid>``.
macOS: a launchd daemon ``/Library/LaunchDaemons/foundation.foxlight.skulk.plugins.
u<uid>.plist`` in the system domain with the owner's ``UserName``, from
``/Library/Application Support/SkulkPluginServices/<uid>``. Anywhere else (a container,
this machine), or when setup runs on another service root, :func:`detect` / :func:`fit`
say so in a sentence and nothing is registered: the caller offers the foreground manager.

Setup runs as the nonroot owner and never as a whole under ``sudo``. The two privileged
steps (provisioning the root-owned parent of the service root, writing the root-owned
definition and starting it) go to the fixed helper ``system_helper.py`` through ``sudo
-n``, and through ``sudo`` asking for a password on the terminal only when one is needed;
the helper derives every path and argument itself. When the root is in place, the
installed definition is exactly the one the helper would write and the service is
healthy, nothing is elevated.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from skulk_cli.plugin_service import system_helper
from skulk_cli.plugin_service.setup import ServiceKind
from skulk_host.files import atomic_write

PROBE_SECONDS: Final = 5.0
HELPER_SECONDS: Final = 180.0
HELPER: Final = Path(system_helper.__file__).resolve()
RUNNING_STATES: Final = ("running", "degraded", "starting", "initializing")
"""``systemctl is-system-running`` answers under which system units can be managed."""

Say = Callable[[str], None]


class Unregistered(Exception):
    """Registration refused or failed; the message is a sentence for the owner."""


@dataclass(frozen=True, slots=True)
class Detected:
    kind: ServiceKind
    reason: str
    """Why no service manager can be used (empty when one can)."""


def _run(*command: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
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
        probe = _run("systemctl", "is-system-running")
        state = probe.stdout.strip() if probe is not None else ""
        if state not in RUNNING_STATES:
            return Detected(
                "none",
                "systemd is not running as the system's service manager"
                + (f" (systemctl is-system-running: {state})" if state else ""),
            )
        return Detected("systemd", "")
    return Detected("none", f"no supported service manager on {sys.platform}")


def durable_root(kind: ServiceKind, uid: int | None = None) -> Path | None:
    """The platform's durable service root of this user, where a service manager runs."""
    if kind == "none":
        return None
    return system_helper.service_root(kind, os.getuid() if uid is None else uid)


def default_root() -> Path | None:
    """:func:`durable_root` for what runs here (``service_root``'s system default)."""
    return durable_root(detect().kind)


def under_sudo() -> bool:
    """The whole command runs under ``sudo`` (root, with the invoking user recorded)."""
    return os.geteuid() == 0 and "SUDO_UID" in os.environ


def fit(detected: Detected, root: Path) -> Detected:
    """``detected``, or no registration when setup runs on another service root: the
    fixed system definition only ever runs the durable root."""
    wanted = durable_root(detected.kind)
    if wanted is None or root == wanted:
        return detected
    return Detected(
        "none",
        f"the service root {root} is not the durable system service root {wanted}; "
        "only that root is registered",
    )


def check_owner(kind: ServiceKind) -> None:
    """Refuse an owner a system service cannot run as."""
    if kind != "none" and os.geteuid() == 0:
        raise Unregistered(
            "The plugin manager registers as a system service that runs as a nonroot "
            "account: run setup as the Skulk owner, not as root."
        )


def provision(kind: ServiceKind, root: Path, say: Say, uid: int | None = None) -> bool:
    """Make the durable service root through the helper unless it is already in
    place (a root-owned parent, a root of this user); ``True`` when it elevated."""
    if kind == "none":
        return False
    owner = os.getuid() if uid is None else uid
    if _root_in_place(root, owner):
        return False
    _elevate(f"provision-{kind}", owner, say)
    if not _root_in_place(root, owner):
        raise Unregistered(f"The service root {root} was not provisioned for this user.")
    return True


def _root_in_place(root: Path, uid: int) -> bool:
    try:
        parent, own = root.parent.lstat(), root.lstat()
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(parent.st_mode)
        and parent.st_uid == 0
        and not parent.st_mode & 0o022
        and stat.S_ISDIR(own.st_mode)
        and own.st_uid == uid
    )


def stage_tls_ca(root: Path, tls_ca: str | None) -> None:
    """Copy the feed CA to the fixed name the system definition passes to the manager
    (the service never reads it from the owner's own path)."""
    target = root / system_helper.TLS_CA_FILE
    if tls_ca is None:
        target.unlink(missing_ok=True)
        return
    atomic_write(target, Path(tls_ca).read_bytes())


def installed_current(kind: ServiceKind, root: Path, uid: int | None = None) -> bool:
    """The installed definition is root-owned 0644 and exactly what the helper writes."""
    if kind == "none":
        return False
    owner = os.getuid() if uid is None else uid
    path = system_helper.definition_path(kind, owner)
    try:
        info = path.lstat()
        wanted, _ = system_helper.definitions(kind, owner, root)
        return (
            stat.S_ISREG(info.st_mode)
            and info.st_uid == 0
            and stat.S_IMODE(info.st_mode) == 0o644
            and path.read_bytes() == wanted
        )
    except (OSError, system_helper.Refused):
        return False


def service_running(kind: ServiceKind, uid: int | None = None) -> bool:
    """The service manager holds the service enabled and running (read-only queries)."""
    name = system_helper.label(os.getuid() if uid is None else uid)
    if kind == "systemd":
        enabled = _run("systemctl", "is-enabled", f"{name}.service")
        active = _run("systemctl", "is-active", f"{name}.service")
        return (
            enabled is not None
            and enabled.stdout.strip() == "enabled"
            and active is not None
            and active.stdout.strip() in ("active", "activating")
        )
    if kind == "launchd":
        loaded = _run("launchctl", "print", f"system/{name}")
        return loaded is not None and loaded.returncode == 0
    return False


def register(
    kind: ServiceKind, root: Path, say: Say, *, healthy: bool, uid: int | None = None
) -> bool:
    """Install and (re)start the system service unless the installed definition is
    current, the service runs and ``healthy`` (the manager answers, or restarts by
    itself, on the selected runtime); ``True`` when it elevated."""
    if kind == "none":
        raise Unregistered("no service manager runs here")
    if healthy and installed_current(kind, root, uid) and service_running(kind, uid):
        return False
    _elevate(f"register-{kind}", os.getuid() if uid is None else uid, say)
    return True


def helper_command(verb: str, uid: int) -> list[str]:
    """The fixed helper invocation (standard library only: ``-I -S``)."""
    return [sys.executable, "-I", "-S", str(HELPER), verb, str(uid)]


def _elevate(verb: str, uid: int, say: Say) -> None:
    sudo = shutil.which("sudo")
    if sudo is None:
        raise Unregistered(
            "sudo is not installed, and the system service needs its fixed helper run "
            f"as root: {' '.join(helper_command(verb, uid))}"
        )
    command = helper_command(verb, uid)
    say(f"Running the fixed system-service helper through sudo: {verb} {uid}.")
    done = _helper(sudo, "-n", *command)
    if done.returncode == 1 and "password" in done.stderr.lower():
        if not os.isatty(0):
            raise Unregistered(
                "sudo needs a password for the system-service helper: rerun setup in a "
                "terminal, where sudo asks for it"
            )
        say("sudo needs your password to run it (it asks on this terminal).")
        done = _helper(sudo, *command)
    if done.returncode != 0:
        sentence = done.stderr.strip().splitlines()[-1:] or ["no reason given"]
        raise Unregistered(f"the system-service helper ({verb}) failed: {sentence[0]}")


def _helper(*command: str) -> subprocess.CompletedProcess[str]:
    # NOTE: sudo prompts on /dev/tty, not on the captured streams, so capturing the
    # helper's answer leaves an interactive password prompt working.
    try:
        return subprocess.run(
            list(command), capture_output=True, text=True, timeout=HELPER_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        raise Unregistered("the system-service helper did not finish in time") from None
    except OSError as error:
        raise Unregistered(f"sudo could not be run: {error.strerror}") from None
