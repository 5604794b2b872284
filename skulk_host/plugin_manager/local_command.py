"""An installed plugin's local setup or management command (``skulk-plugin-service
setup-plugin`` / ``manage-plugin``), verified here and then executed in place.

Reached as ``python -m skulk.extensions.runtime_manager launch --root ROOT --plugin ID
--kind setup|manage -- ARGS`` (the service command's own entry point, which the
terminal command executes: ``skulk_cli`` imports nothing of this layer). Nothing the
caller supplies names an executable, module or path: the launcher is the selected
generation's sealed bundle shim (``__setup__.py`` / ``__manage__.py``, loaded as that
module, its ``main`` called) or the entry its signed wheels declare under
``skulk.capability_runtime`` (``setup`` or ``manage``); exactly one source.

Before anything of the plugin runs: a nonroot owner; at most 128 arguments and 16 KiB of
UTF-8 argument bytes; a registered installation with a selected generation (a disabled
selection is allowed, an uninstalled one is not) and no pending selection change
(accepted, applying or ``recovery_required``: recover or disable it first). Then the
installer fence (the flock staging and selection take) is acquired, waiting up to 30
seconds, and everything is checked again under it: the selection is unchanged, the
retained signed release record verifies against the installation's current trust and
this host, and the generation's seal holds. The fence's descriptor is inherited by the
command, so no generation switch can happen until it exits. The command inherits the
terminal (stdin, stdout, stderr, signals) and is never replayed.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import stat
import sys
import time
from pathlib import Path
from typing import Final, Literal

import msgspec

from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_core.plugins.verify import check_host, verify_release
from skulk_host.plugin_manager.protocol import Selection
from skulk_host.plugin_manager.releases import SourceRecord
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_release.archive import SHIM_LOADER
from skulk_host.plugin_release.host import host_facts
from skulk_host.plugin_release.staging import single_entry
from skulk_host.plugin_release.wheels import declared_entries

Kind = Literal["setup", "manage"]
MAX_ARGUMENTS: Final = 128
MAX_ARGUMENT_BYTES: Final = 16 * 1024
FENCE_WAIT_SECONDS: Final = 30.0
PENDING_STATES: Final = frozenset({"accepted", "applying", "recovery_required"})

_RUN: Final = SHIM_LOADER + (
    "import importlib, sys\n"
    "site, bundle, entry = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "sys.path.append(site)\n"
    "sys.argv = [entry, *sys.argv[4:]]\n"
    "module, _, function = entry.partition(':')\n"
    "loaded = _load_shim(bundle, module) if bundle else importlib.import_module(module)\n"
    "raise SystemExit(getattr(loaded, function)())\n"
)
"""argv: ``site``, ``bundle`` (empty for a wheel's entry), ``entry``, the arguments."""


def _check_arguments(arguments: list[str]) -> None:
    if len(arguments) > MAX_ARGUMENTS:
        raise refuse("malformed", f"At most {MAX_ARGUMENTS} plugin arguments are accepted.")
    try:
        size = sum(len(a.encode()) for a in arguments)
    except UnicodeEncodeError:
        raise refuse("malformed", "Plugin arguments must be UTF-8 text.") from None
    if size > MAX_ARGUMENT_BYTES:
        raise refuse("malformed", "Plugin arguments are at most 16 KiB of UTF-8 text.")


def _check_root(root: Path) -> None:
    try:
        info = root.lstat()
    except FileNotFoundError:
        raise refuse("unreachable", "The connection names no manager root here.") from None
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise refuse("source_invalid", "The manager root must be an owner-only directory.")


def _selected(store: Store, plugin_id: str) -> tuple[Selection, str]:
    selection = store.selection(plugin_id)
    if selection.runtime_digest is None:
        raise refuse("not_found", f"{plugin_id} has no selected release: install one first.")
    if selection.uninstalled:
        raise refuse("malformed", f"{plugin_id} is uninstalled: select a release again first.")
    pending = [op for op in store.operations(plugin_id) if op.state in PENDING_STATES]
    if pending:
        raise refuse(
            "busy",
            f"A selection change ({pending[0].operation_id}) is pending for {plugin_id}: "
            "recover or disable it before running plugin commands.",
        )
    return selection, selection.runtime_digest


def _acquire(path: Path, wait: float) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise refuse(
                    "busy",
                    "Another installer or selection holds this installation: finish it and "
                    "run the command again.",
                ) from None
            time.sleep(0.05)


def _verify_trust(store: Store, plugin_id: str, digest: str) -> None:
    """The retained signed record verified again: publisher trusted and unrevoked,
    unexpired, this host's build and platform."""
    directory = store.directory(plugin_id)
    source_path = directory / "source.json"
    reviewed = directory / "reviews" / f"{digest}.json"
    source = (
        msgspec.json.decode(source_path.read_bytes(), type=SourceRecord)
        if source_path.is_file()
        else SourceRecord()
    )
    if source.trust is None or not reviewed.is_file():
        raise refuse(
            "publisher_untrusted",
            "The selected runtime has no signed release record under this installation's "
            "trust: its trust history is lost.",
        )
    release = verify_release(reviewed.read_bytes(), source.trust, int(time.time()))
    if release.runtime_digest != digest:
        raise refuse("digest_mismatch", "The retained release record names another runtime.")
    check_host(release.claims, host_facts())


def declared_entry(site: Path, kind: Kind) -> str:
    """The one ``kind`` entry the installed (sealed) distributions declare, read as data."""
    return single_entry(declared_entries(site, kind), kind)


def prepare(
    root: Path, plugin_id: str, kind: Kind, arguments: list[str], wait: float = FENCE_WAIT_SECONDS
) -> tuple[list[str], int]:
    """The verified argv and the held fence's descriptor (inheritable)."""
    if os.geteuid() == 0:
        raise refuse("malformed", "Plugin commands run as the nonroot Skulk owner, not as root.")
    _check_arguments(arguments)
    _check_root(root)
    store = Store(root)
    if not store.exists(plugin_id):
        raise refuse("not_found", f"No managed installation {plugin_id} is registered.")
    before, _ = _selected(store, plugin_id)
    fd = _acquire(store.directory(plugin_id) / "fence.lock", wait)
    try:
        selection, digest = _selected(store, plugin_id)
        if selection != before:
            raise refuse("malformed", "The selection changed while waiting: run the command again.")
        _verify_trust(store, plugin_id, digest)
        # The seals hold and exactly one source names the launcher.
        launcher = store.stager(plugin_id).launcher(digest, kind)
    except BaseException:
        os.close(fd)
        raise
    os.set_inheritable(fd, True)
    bundle = "" if launcher.bundle is None else str(launcher.bundle)
    command = [sys.executable, "-I", "-B", "-c", _RUN, str(launcher.site), bundle, launcher.entry]
    return [*command, *arguments], fd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skulk.extensions.runtime_manager launch")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--kind", choices=["setup", "manage"], required=True)
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    arguments = list(args.arguments)
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    kind: Kind = "setup" if args.kind == "setup" else "manage"
    try:
        command, _fence = prepare(args.root, args.plugin, kind, arguments)
    except PluginRefusal as refusal:
        print(refusal.message, file=sys.stderr)
        return 1
    # NOTE: the fence descriptor stays open across exec: it is released when the
    # plugin's command exits, never earlier.
    os.execv(command[0], command)
    return 1  # not reached
