"""The fixed privileged helper ``skulk-plugin-service setup`` runs through ``sudo``.

Run as ``python -I -S system_helper.py VERB UID`` (standard library only, so ``-S``
keeps every installed package out of the root process). The verbs are fixed:

- ``provision-systemd UID`` / ``provision-launchd UID``: the root-owned parent
  (``/var/lib/skulk-plugin-services``, ``/Library/Application Support/
  SkulkPluginServices``, 0755) and the owner's durable service root ``<parent>/<UID>``
  (owned by UID, 0700);
- ``register-systemd UID``: ``/etc/systemd/system/foundation.foxlight.skulk.plugins.
  u<UID>.service`` (``User=<UID>``, ``WantedBy=multi-user.target``), then
  ``daemon-reload``, ``enable`` and ``restart``;
- ``register-launchd UID``: ``/Library/LaunchDaemons/foundation.foxlight.skulk.plugins.
  u<UID>.plist`` (system domain, ``UserName``), then ``bootout`` and ``bootstrap system``.

The caller supplies only the verb and the UID (nonroot, and under ``sudo`` the invoking
user's own): paths, arguments and the definition's text are derived here from the fixed
layout, which is validated (root-owned parent, owner-owned root, a staged runtime).
Definitions are written root-owned 0644 through a temp file and a rename. A definition
that is not one of ours occupying the reserved name is refused; the earlier forms (the
Linux unit with a quoted ``WorkingDirectory``, and the command from before the runtime's
bootstrap) are recognised and replaced with the current one.
The service tools are run from fixed paths with a fixed ``PATH``.

``SKULK_SYSTEM_HELPER_PREFIX`` (tests only) roots every fixed path, tools included, in a
temporary directory; ``sudo``'s environment reset drops it in real use.

The renderers are pure and shared with ``registration.py``, which compares the
installed definition with them to decide whether setup needs elevation at all.
"""

from __future__ import annotations

import os
import plistlib
import pwd
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final, Literal

Kind = Literal["systemd", "launchd"]
Step = tuple[list[str], bool]
"""A service-tool command and whether it must succeed."""

PREFIX_ENV: Final = "SKULK_SYSTEM_HELPER_PREFIX"
LABEL_PREFIX: Final = "foundation.foxlight.skulk.plugins.u"
SERVICES: Final[dict[Kind, str]] = {
    "systemd": "/var/lib/skulk-plugin-services",
    "launchd": "/Library/Application Support/SkulkPluginServices",
}
DEFINITIONS: Final[dict[Kind, str]] = {
    "systemd": "/etc/systemd/system",
    "launchd": "/Library/LaunchDaemons",
}
SUFFIX: Final[dict[Kind, str]] = {"systemd": ".service", "launchd": ".plist"}
TOOLS: Final[dict[Kind, tuple[str, ...]]] = {
    "systemd": ("/usr/bin/systemctl", "/bin/systemctl"),
    "launchd": ("/bin/launchctl",),
}
MANAGER_MODULE: Final = "skulk.extensions.runtime_manager"
TLS_CA_FILE: Final = "tls-ca.pem"
"""The feed CA the service trusts, copied into the service root by setup (fixed name)."""
MAX_DEFINITION_BYTES: Final = 256 * 1024
TOOL_SECONDS: Final = 120.0
TOOL_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEMD_SAFE: Final = re.compile(r"[A-Za-z0-9/._-]+")
"""Characters a systemd path may hold unquoted (no specifier ``%``, no space, no quote)."""

EXIT_REFUSED: Final = 3
EXIT_TOOL_FAILED: Final = 4


class Refused(Exception):
    """The helper will not do this; the message is a sentence for the owner."""


def prefix() -> str:
    value = os.environ.get(PREFIX_ENV, "")
    if value and not os.path.isabs(value):
        raise Refused(f"{PREFIX_ENV} must be an absolute path.")
    return value.rstrip("/")


def label(uid: int) -> str:
    return f"{LABEL_PREFIX}{uid}"


def services_dir(kind: Kind) -> Path:
    return Path(prefix() + SERVICES[kind])


def service_root(kind: Kind, uid: int) -> Path:
    """The durable service root of ``uid`` for this kind of service manager."""
    return services_dir(kind) / str(uid)


def definition_path(kind: Kind, uid: int) -> Path:
    return Path(prefix() + DEFINITIONS[kind]) / f"{label(uid)}{SUFFIX[kind]}"


def manager_command(root: Path, tls: bool, *, earlier: bool = False) -> list[str]:
    """The fixed manager command: the selected staged runtime's interpreter, isolated and
    without site initialisation, on its ``bootstrap.py``, which verifies the seal before
    anything of the runtime is imported (``skulk_host.plugin_service.bootstrap``).
    ``earlier`` is the form registered before the bootstrap (``-I -B -m``), recognised
    only so it can be replaced."""
    current = root / "runtimes" / "current"
    entry = ["-I", "-B", "-m", MANAGER_MODULE] if earlier else ["-I", "-S", "-B"]
    command = [
        str(current / "bin" / "python"),
        *entry,
        *([] if earlier else [str(current / "bootstrap.py")]),
        "serve",
        "--root",
        str(root / "manager"),
        "--sealed-runtime",
    ]
    if tls:
        command += ["--tls-ca", str(root / TLS_CA_FILE)]
    return command


def systemd_unit(
    uid: int, root: Path, tls: bool, *, legacy: bool = False, earlier: bool = False
) -> str:
    """The unit text; ``legacy`` is the earlier form, whose quoted ``WorkingDirectory``
    systemd does not accept, and ``earlier`` the command from before the bootstrap (both
    recognised only so they can be repaired)."""
    if not SYSTEMD_SAFE.fullmatch(str(root)):
        raise Refused(f"The service root {root} holds characters a systemd unit cannot carry.")
    directory = f'"{root}"' if legacy else str(root)
    return (
        "[Unit]\n"
        f"Description=Skulk local plugin manager (uid {uid})\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"User={uid}\n"
        f"WorkingDirectory={directory}\n"
        f"ExecStart={' '.join(manager_command(root, tls, earlier=earlier))}\n"
        "Restart=always\n"
        "RestartSec=5\n"
        "UMask=0077\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def launchd_plist(
    uid: int, user_name: str, root: Path, tls: bool, *, earlier: bool = False
) -> bytes:
    body = {
        "Label": label(uid),
        "ProgramArguments": manager_command(root, tls, earlier=earlier),
        "UserName": user_name,
        "WorkingDirectory": str(root),
        "RunAtLoad": True,
        "KeepAlive": True,
        "Umask": 0o077,
    }
    return plistlib.dumps(body, fmt=plistlib.FMT_XML, sort_keys=True)


def has_tls_ca(root: Path) -> bool:
    try:
        return stat.S_ISREG((root / TLS_CA_FILE).lstat().st_mode)
    except FileNotFoundError:
        return False


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise Refused(f"No account has the uid {uid} on this host.") from None


def definitions(kind: Kind, uid: int, root: Path) -> tuple[bytes, list[bytes]]:
    """The definition this layout needs now, and every other form that is ours (the
    other TLS choice, and the earlier forms: the quoted unit, the pre-bootstrap command)."""
    tls = has_tls_ca(root)
    if kind == "systemd":
        forms = [systemd_unit(uid, root, t).encode() for t in (tls, not tls)] + [
            systemd_unit(uid, root, t, legacy=quoted, earlier=True).encode()
            for t in (tls, not tls)
            for quoted in (False, True)
        ]
    else:
        name = user_name(uid)
        forms = [
            launchd_plist(uid, name, root, t, earlier=old)
            for old in (False, True)
            for t in (tls, not tls)
        ]
    return forms[0], forms[1:]


def _root_owned_dir(path: Path, *, fix: bool = False) -> None:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
        raise Refused(f"{path} must be a directory owned by root, not a link.")
    if info.st_mode & 0o022:
        if not fix:
            raise Refused(f"{path} must not be writable by group or others.")
        os.chmod(path, 0o755)


def _owner_dir(path: Path, uid: int) -> None:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise Refused(f"{path} must be a directory owned by uid {uid}, not a link.")


def provision(kind: Kind, uid: int) -> str:
    try:
        account = pwd.getpwuid(uid)
    except KeyError:
        raise Refused(f"No account has the uid {uid} on this host.") from None
    parent = services_dir(kind)
    if not parent.parent.is_dir():
        raise Refused(f"{parent.parent} does not exist on this host.")
    if not os.path.lexists(parent):
        os.mkdir(parent, 0o755)
        os.chown(parent, 0, 0)
    _root_owned_dir(parent, fix=True)
    root = parent / str(uid)
    if not os.path.lexists(root):
        os.mkdir(root, 0o700)
        os.chown(root, uid, account.pw_gid)
    _owner_dir(root, uid)
    return f"provisioned {root}"


def _write_root_file(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _installed(path: Path) -> bytes | None:
    """The definition occupying ``path``, or ``None`` when the name is free."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DEFINITION_BYTES:
        raise Refused(f"An unrelated definition occupies the reserved service name {path}.")
    return path.read_bytes()


def _tool(kind: Kind) -> str:
    for candidate in TOOLS[kind]:
        if os.path.isfile(prefix() + candidate):
            return prefix() + candidate
    raise Refused(f"{TOOLS[kind][0]} is not installed on this host.")


def _steps(kind: Kind, uid: int, path: Path) -> list[Step]:
    if kind == "systemd":
        unit = path.name
        return [(["daemon-reload"], True), (["enable", unit], True), (["restart", unit], True)]
    target = f"system/{label(uid)}"
    return [
        (["enable", target], True),
        (["bootout", target], False),  # NOTE: not loaded yet is not a failure
        (["bootstrap", "system", str(path)], True),
    ]


def register(kind: Kind, uid: int) -> tuple[str, list[Step]]:
    """Write the fixed definition; the outcome and the tool commands still to run."""
    parent = services_dir(kind)
    _root_owned_dir(parent)
    root = parent / str(uid)
    _owner_dir(root, uid)
    if not (root / "runtimes" / "current" / "bin" / "python").exists():
        raise Refused(f"No staged runtime is selected under {root}: run setup again.")
    path = definition_path(kind, uid)
    _root_owned_dir(path.parent)
    wanted, ours = definitions(kind, uid, root)
    present = _installed(path)
    if present is not None and present != wanted and present not in ours:
        raise Refused(f"An unrelated definition occupies the reserved service name {path}.")
    info = path.lstat() if present is not None else None
    current = (
        info is not None
        and present == wanted
        and info.st_uid == 0
        and stat.S_IMODE(info.st_mode) == 0o644
    )
    outcome = "unchanged" if current else ("written" if present is None else "repaired")
    if not current:
        _write_root_file(path, wanted)
    tool = _tool(kind)
    return f"{outcome} {path}", [([tool, *step], must) for step, must in _steps(kind, uid, path)]


def _run_steps(steps: list[Step]) -> None:
    for command, must in steps:
        try:
            done = subprocess.run(
                command,
                env={"PATH": TOOL_PATH, "LANG": "C"},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=TOOL_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if must and (done is None or done.returncode != 0):
            name = os.path.basename(command[0])
            print(f"{name} {' '.join(command[1:])} failed.", file=sys.stderr)
            raise SystemExit(EXIT_TOOL_FAILED)


def _uid(text: str) -> int:
    if not text.isdigit() or len(text) > 10:
        raise Refused("The uid must be a decimal number.")
    uid = int(text)
    if uid == 0:
        raise Refused("The plugin service runs as a nonroot account, never as root.")
    invoker = os.environ.get("SUDO_UID")
    if invoker is not None and invoker != str(uid):
        raise Refused("Through sudo, the helper registers only the invoking user's service.")
    if os.geteuid() != 0:
        raise Refused("The system-service helper must run as root (through sudo).")
    return uid


VERBS: Final[dict[str, tuple[str, Kind]]] = {
    "provision-systemd": ("provision", "systemd"),
    "provision-launchd": ("provision", "launchd"),
    "register-systemd": ("register", "systemd"),
    "register-launchd": ("register", "launchd"),
}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in VERBS:
        print(f"usage: system_helper.py {{{','.join(VERBS)}}} UID", file=sys.stderr)
        return 2
    action, kind = VERBS[argv[0]]
    try:
        uid = _uid(argv[1])
        if action == "provision":
            print(provision(kind, uid))
            return 0
        outcome, steps = register(kind, uid)
    except Refused as refused:
        print(refused, file=sys.stderr)
        return EXIT_REFUSED
    except OSError as error:
        print(f"The system-service helper failed: {error.strerror}.", file=sys.stderr)
        return EXIT_TOOL_FAILED
    _run_steps(steps)
    print(outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
