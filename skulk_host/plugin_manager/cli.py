"""The manager's command line: ``serve --root ROOT`` runs the manager; ``call --root
ROOT`` sends one JSON request read from standard input and prints the response (exit 0
when it succeeded, 1 when it was refused); ``launch --root ROOT --plugin ID --kind
setup|manage -- ARGS`` verifies and executes an installed plugin's local command
(``local_command.py``). ``serve --sealed-runtime`` runs only from a staged runtime whose
seal verified, by the generation's ``bootstrap.py`` before anything was imported or, started
the earlier way, here; it refuses to start (exit 2) when it differs (``runtime.py``);
after a ``reload_runtime`` it stops (exit 0) for its service to restart it. ``serve``
holds the root's lifetime fence until its owners are closed (``server.py``). Reached as
``python -m skulk_host.plugin_manager``, as the spec's ``python -m
skulk.extensions.runtime_manager`` and, for the registered service, through the
bootstrap, which runs that module."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import ssl
import sys
from pathlib import Path

from skulk_core.plugins.errors import PluginRefusal
from skulk_host.plugin_manager.catalog import Catalog
from skulk_host.plugin_manager.client import call_raw
from skulk_host.plugin_manager.lifecycle import Lifecycle
from skulk_host.plugin_manager.protocol import MAX_REQUEST_BYTES
from skulk_host.plugin_manager.releases import Releases
from skulk_host.plugin_manager.runtime import LIVE, ManagerRuntime, own_runtime
from skulk_host.plugin_manager.server import ManagerServer, serving_lifetime
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_manager.supervisor import Supervisor

log = logging.getLogger("skulk.plugins.manager")


def _tls(ca_file: Path | None) -> ssl.SSLContext:
    """The feeds' TLS trust: the system store, or exactly one CA file when given."""
    if ca_file is None:
        return ssl.create_default_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(ca_file))
    return context


async def _serve(root: Path, ca_file: Path | None, runtime: ManagerRuntime = LIVE) -> None:
    store = Store(root)
    store.open()
    tls = _tls(ca_file)
    releases = Releases(store, tls)
    lifecycle = Lifecycle(store, releases)
    lifecycle.catalog = Catalog(root, tls, releases.host, releases, lifecycle.register)
    supervisor = Supervisor(store)
    lifecycle.supervisor = supervisor
    supervisor.start()
    stop = asyncio.Event()
    server = ManagerServer(root, lifecycle, runtime=runtime, on_reload=stop.set)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.ensure_future(server.serve_forever())
    print("manager ready", flush=True)
    await stop.wait()
    serving.cancel()
    await server.close()
    await asyncio.to_thread(supervisor.stop)
    await asyncio.to_thread(lifecycle.join)
    await asyncio.to_thread(releases.join)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["launch"]:
        # An installed plugin's verified setup or management command (it replaces
        # this process): see ``skulk_host.plugin_manager.local_command``.
        from skulk_host.plugin_manager import local_command  # noqa: PLC0415

        return local_command.main(arguments[1:])
    parser = argparse.ArgumentParser(prog="python -m skulk.extensions.runtime_manager")
    parser.add_argument("command", choices=["serve", "call"])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--tls-ca", type=Path, default=None, help="trust only this CA for feeds")
    parser.add_argument(
        "--sealed-runtime",
        action="store_true",
        help="run only from a staged runtime whose seal verifies (the registered service)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "serve":
        try:
            runtime = own_runtime(args.sealed_runtime)
        except PluginRefusal as refusal:
            print(f"The plugin manager refuses to start: {refusal.message}", file=sys.stderr)
            return 2
        if runtime.kind == "staged":
            log.info(
                "serving from the sealed runtime %s (seal verified by the %s)",
                runtime.generation,
                runtime.verified_by,
            )
        try:
            # NOTE: held until every owner is closed: a manager started while the
            # previous one still stops its owners waits here, before supervising any.
            with serving_lifetime(args.root):
                asyncio.run(_serve(args.root, args.tls_ca, runtime))
        except PluginRefusal as refusal:
            print(f"The plugin manager stopped: {refusal.message}", file=sys.stderr)
            return 1
        return 0
    try:
        payload = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        response = call_raw(args.root, payload)
    except PluginRefusal as refusal:
        print(
            json.dumps({"ok": False, "error": {"code": refusal.code, "message": refusal.message}})
        )
        return 1
    print(json.dumps(response))
    return 0 if response.get("ok") else 1
