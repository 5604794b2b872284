"""The ``skulk-plugin-service`` Typer app.

Every command but ``setup`` and ``serve`` reaches the manager through the protected
connection record in the Skulk configuration home (``--config-home``, else
``SKULK_CONFIG_HOME``, else ``~/.config/skulk``): no command takes a manager root,
socket or executable path. Refusals print the manager's sentence and exit 1.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn

import msgspec
import typer
from rich.console import Console
from typer._completion_classes import completion_init

from skulk_cli import help_labels
from skulk_cli.operator_credentials import config_home as default_config_home
from skulk_cli.plugin_service import registration
from skulk_cli.plugin_service.feed_probe import Probe, feed_tls, probe_feed
from skulk_cli.plugin_service.guided import Installer, Refused
from skulk_cli.plugin_service.setup import (
    manager_root,
    prepare,
    read_record,
    record_staged,
    runtime_verified,
    serve_command,
    service_root,
    write_record,
)
from skulk_core.plugins.errors import PluginRefusal, ProtocolKind, protocol_sentence
from skulk_host.plugin_manager.client import call_raw
from skulk_host.plugin_manager.connection import read_connection
from skulk_host.plugin_manager.protocol import MAX_REQUEST_BYTES
from skulk_host.plugin_service.runtime import Completion
from skulk_host.plugin_service.staging import activate_service_runtime, stage_service_runtime

PROG_NAME = "skulk-plugin-service"
NO_CONNECTION: Final = f"No local plugin manager is set up on this host: run {PROG_NAME} setup."
NO_MANAGER: Final = f"No plugin manager answers here: start it ({PROG_NAME} serve, or its service)."
"""What the terminal says when no manager is set up, or none answers: the command to run."""
READY_SECONDS = 90.0
"""How long setup waits for a registered service to answer on the selected runtime."""

# NOTE: as in skulk_cli.main: the committed completion scripts (completions/) speak
# Typer's protocol, which only its registered classes answer.
completion_init()
help_labels.install()

app = typer.Typer(
    name=PROG_NAME,
    help="Set up the local plugin manager and install, inspect and remove managed plugins.",
    add_completion=False,
    pretty_exceptions_show_locals=False,
    no_args_is_help=True,
)

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        envvar="SKULK_PLUGIN_SERVICE_ROOT",
        help="Service root (default: the durable system service root where a service "
        "manager runs, else ~/.local/share/skulk-plugin-service).",
    ),
]
ConfigHomeOption = Annotated[
    Path | None,
    typer.Option(
        "--config-home",
        envvar="SKULK_CONFIG_HOME",
        help="Skulk configuration home holding the connection record.",
    ),
]


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _config_home(explicit: Path | None) -> Path:
    return explicit.expanduser().absolute() if explicit else default_config_home()


def _fail(message: str) -> NoReturn:
    Console(stderr=True, highlight=False, soft_wrap=True).print(message, markup=False)
    raise typer.Exit(1)


def _sentence(error: dict[str, Any]) -> str:
    if error.get("code") == "release_protocol_unsupported":
        kind: ProtocolKind = "runtime" if error.get("kind") == "runtime" else "release"
        return protocol_sentence(kind, int(error["offered"]), tuple(error["accepted"]))
    return str(error.get("message") or "The manager refused the request.")


def _raw(config_home: Path | None, payload: bytes) -> dict[str, Any]:
    connection = read_connection(_config_home(config_home), missing=NO_CONNECTION)
    return call_raw(connection.root, payload, missing=NO_MANAGER)


def _caller(config_home: Path | None) -> Any:
    def call(request: dict[str, Any]) -> Any:
        try:
            answer = _raw(config_home, json.dumps(request).encode())
        except PluginRefusal as refusal:
            raise Refused(refusal.message) from None
        if not answer.get("ok"):
            raise Refused(_sentence(answer.get("error") or {}))
        return answer["result"]

    return call


def _run(config_home: Path | None, request: dict[str, Any]) -> Any:
    try:
        return _caller(config_home)(request)
    except Refused as refused:
        _fail(str(refused))


@app.command()
def setup(
    root: RootOption = None,
    config_home: ConfigHomeOption = None,
    tls_ca: Annotated[
        Path | None,
        typer.Option("--tls-ca", help="Trust only this CA certificate for release feeds."),
    ] = None,
    foreground: Annotated[
        bool,
        typer.Option("--foreground", help="Where no service manager runs, run the manager now."),
    ] = False,
) -> None:
    """Stage and seal the manager's runtime, select it, and register it as a service."""
    console = _console()
    if registration.under_sudo():
        _fail(
            "Do not run setup under sudo: run it as the nonroot Skulk owner; it asks sudo "
            "itself for the fixed system-service helper."
        )
    detected = registration.detect()
    service = service_root(root, registration.durable_root(detected.kind))
    detected = registration.fit(detected, service)
    home = _config_home(config_home)
    try:
        registration.check_owner(detected.kind)
        registration.provision(detected.kind, service, _say(console))
    except registration.Unregistered as unregistered:
        _fail(str(unregistered))
    try:
        record = prepare(service, home, tls_ca)
        completion, fresh = stage_service_runtime(service)
        record = record_staged(service, record, completion)
        reloading = _select(service, completion)
    except PluginRefusal as refusal:
        _fail(refusal.message)
    record = write_record(service, msgspec.structs.replace(record, phase="selected"))
    if fresh:
        console.print(
            f"Staged runtime {completion.generation}: {completion.files} files, "
            f"{completion.bytes} bytes, sealed as {completion.seal_sha256}.",
            markup=False,
        )
    command = serve_command(record, service)
    if detected.kind == "none":
        record = write_record(service, msgspec.structs.replace(record, service="none"))
        console.print(
            f"The plugin manager is not registered as a service ({detected.reason}), so "
            "it will not start at boot.",
            markup=False,
        )
        if reloading:
            console.print(
                "The running manager selected this runtime and stopped: start it again.",
                markup=False,
            )
        if not foreground:
            console.print(
                f"Run it in the foreground with: {PROG_NAME} serve"
                + (f" --root {service}" if root else ""),
                markup=False,
            )
            console.print(json.dumps(_setup_summary(record, "selected", "none")))
            return
        console.print("Starting the plugin manager in the foreground (Ctrl-C stops it).")
        os.execv(command[0], command)
    try:
        registration.stage_tls_ca(service, record.tls_ca)
        healthy = reloading or _on_generation(service, completion.generation)
        registration.register(detected.kind, service, _say(console), healthy=healthy)
    except (registration.Unregistered, OSError) as failure:
        _fail(f"Registering the {detected.kind} service failed: {failure}.")
    record = write_record(
        service, msgspec.structs.replace(record, phase="registered", service=detected.kind)
    )
    if not _ready(service, completion.generation):
        summary = _setup_summary(record, "registered", detected.kind)
        console.print(json.dumps({**summary, "error_code": "service_readiness_pending"}))
        raise typer.Exit(1)
    record = write_record(service, msgspec.structs.replace(record, phase="ready"))
    console.print(json.dumps(_setup_summary(record, "ready", detected.kind)))


def _answering(service: Path, timeout: float = 5) -> dict[str, Any] | None:
    """The running manager's ``list`` result, or ``None`` when none answers."""
    try:
        answer = call_raw(manager_root(service), b'{"action":"list"}', timeout, missing=NO_MANAGER)
    except PluginRefusal:
        return None
    result = answer.get("result") if answer.get("ok") else None
    return result if isinstance(result, dict) else None


def _select(service: Path, completion: Completion) -> bool:
    """Select ``completion``'s generation: through the running manager's
    ``reload_runtime`` when a staged manager answers on another generation (it stops
    for its service to restart it; ``True``), else directly."""
    running = _answering(service)
    if (
        running is not None
        and running.get("reload_runtime") is True
        and running.get("runtime") == "staged"
        and running.get("runtime_generation") != completion.generation
    ):
        request = {
            "action": "reload_runtime",
            "generation": completion.generation,
            "manifest_sha256": completion.seal_sha256,
        }
        answer = call_raw(manager_root(service), json.dumps(request).encode(), missing=NO_MANAGER)
        if not answer.get("ok"):
            raise PluginRefusal("seal_mismatch", _sentence(answer.get("error") or {}))
        return True
    activate_service_runtime(service, completion)
    return False


def _say(console: Console) -> registration.Say:
    return lambda message: console.print(message, markup=False)


def _on_generation(service: Path, generation: str) -> bool:
    running = _answering(service, timeout=2)
    return running is not None and running.get("runtime_generation") == generation


def _ready(service: Path, generation: str) -> bool:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        running = _answering(service, timeout=2)
        if running is not None and running.get("runtime_generation") == generation:
            return True
        time.sleep(0.5)
    return False


def _setup_summary(record: Any, phase: str, service: str) -> dict[str, Any]:
    return {
        "operation_id": record.operation_id,
        "phase": phase,
        "service": service,
        "runtime": record.runtime,
        "generation": record.generation,
        "seal_sha256": record.seal_sha256,
    }


@app.command()
def serve(root: RootOption = None) -> None:
    """Run the manager in the foreground with the recorded setup."""
    service = service_root(root, registration.default_root())
    try:
        record = read_record(service)
    except PluginRefusal as refusal:
        _fail(refusal.message)
    if record is None:
        _fail(f"No setup here: run {PROG_NAME} setup first.")
    command = serve_command(record, service)
    os.execv(command[0], command)


@app.command()
def status(root: RootOption = None, config_home: ConfigHomeOption = None) -> None:
    """Setup's last phase, whether the selected runtime still matches its seal, and
    whether the manager answers now (read-only)."""
    service = service_root(root, registration.default_root())
    try:
        record = read_record(service)
    except PluginRefusal as refusal:
        _fail(refusal.message)
    verified = runtime_verified(service, record)
    running = None if record is None else _answering(service)
    available = running is not None
    error_code: str | None = None
    if not verified:
        error_code = "registration_or_integrity_unavailable"
    elif not available:
        error_code = "service_unavailable"
    body = {
        "phase": record.phase if record else None,
        "operation_id": record.operation_id if record else None,
        "service": record.service if record else None,
        "runtime": record.runtime if record else None,
        "generation": record.generation if record else None,
        "registered_runtime_verified": verified,
        "management_available": available,
        "running_generation": running.get("runtime_generation") if running else None,
        "error_code": error_code,
    }
    _console().print(json.dumps(body))
    if error_code is not None:
        raise typer.Exit(1)


@app.command()
def manage(config_home: ConfigHomeOption = None) -> None:
    """Send one typed JSON manager request from standard input; print the response."""
    payload = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    try:
        answer = _raw(config_home, payload)
    except PluginRefusal as refusal:
        answer = {"ok": False, "error": {"code": refusal.code, "message": refusal.message}}
    print(json.dumps(answer))
    if not answer.get("ok"):
        raise typer.Exit(1)


@app.command("install-plugin")
def install_plugin(
    managed_id: Annotated[
        str | None, typer.Argument(help="An installation to resume or upgrade.")
    ] = None,
    from_catalog: Annotated[
        str | None,
        typer.Option("--from-catalog", metavar="BUNDLE_ID", help="Install a catalog listing."),
    ] = None,
    sequence: Annotated[
        int | None, typer.Option("--sequence", help="The listed sequence to install.")
    ] = None,
    platform: Annotated[
        str | None, typer.Option("--platform", help="The listed artifact family.")
    ] = None,
    config_home: ConfigHomeOption = None,
) -> None:
    """Guided installation: trust, review, download consent, activation consent."""
    console = _console()
    installer = Installer(console, _caller(config_home), _feed_probe(config_home))
    try:
        installer.run(managed_id, from_catalog=from_catalog, sequence=sequence, platform=platform)
    except Refused as refused:
        _fail(str(refused))
    except (KeyboardInterrupt, EOFError):
        _fail("Interrupted: rerun the resume command printed above to continue.")


def _feed_probe(config_home: Path | None) -> Probe | None:
    """The check that a typed release directory answers, with the manager's own TLS
    trust (the CA `setup --tls-ca` recorded); none when that cannot be known here
    (the manager then reports an unreachable feed itself)."""
    try:
        connection = read_connection(_config_home(config_home), missing=NO_CONNECTION)
        record = read_record(connection.root.parent)
    except PluginRefusal:
        return None
    if record is None:
        return None
    try:
        return probe_feed(feed_tls(record.tls_ca))
    except (OSError, ssl.SSLError):
        return None


@app.command()
def catalog(config_home: ConfigHomeOption = None) -> None:
    """Read and verify the host's signed catalog; print its review."""
    print(json.dumps(_run(config_home, {"action": "read_catalog"})))


def _confirmed(question: str, yes: bool) -> None:
    if not yes and not typer.confirm(question, default=False):
        _fail("Nothing was changed.")


@app.command()
def uninstall(
    managed_id: Annotated[str, typer.Argument(help="The installation to uninstall.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    config_home: ConfigHomeOption = None,
) -> None:
    """Stop the owner and withdraw its capabilities; keep what cleanup needs."""
    observed = _run(config_home, {"action": "get", "plugin_id": managed_id})
    _confirmed(f"Uninstall {managed_id} (its records and credentials are kept)?", yes)
    installer = Installer(_console(), _caller(config_home))
    operation_id = os.urandom(16).hex()
    _run(
        config_home,
        {
            "action": "submit",
            "plugin_id": managed_id,
            "request": {
                "operation_id": operation_id,
                "action": "uninstall",
                "expected_revision": observed["selection_revision"],
            },
        },
    )
    try:
        done = installer.poll(
            lambda: _run(
                config_home,
                {"action": "operation", "plugin_id": managed_id, "operation_id": operation_id},
            ),
            ("complete", "failed", "recovery_required", "superseded"),
        )
    except Refused as refused:
        _fail(str(refused))
    print(json.dumps(done))
    if done["state"] != "complete":
        raise typer.Exit(1)


@app.command("purge-plugin")
def purge_plugin(
    managed_id: Annotated[str, typer.Argument(help="An uninstalled installation to remove.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    config_home: ConfigHomeOption = None,
) -> None:
    """Remove an uninstalled installation with everything it retained."""
    _confirmed(f"Purge {managed_id} and everything it retained?", yes)
    print(json.dumps(_run(config_home, {"action": "purge", "plugin_id": managed_id})))


PluginArguments = Annotated[
    list[str] | None,
    typer.Argument(
        help="The plugin's own fields or verbs, after --. Never put credentials here: the "
        "plugin prompts for them.",
        show_default=False,
    ),
]


def _launch(config_home: Path | None, managed_id: str, kind: str, arguments: list[str]) -> None:
    """Execute the verified ``kind`` entry of the selected generation in place.

    NOTE: the service's own interpreter runs the launcher (``launch`` of the fixed
    runtime-manager command): it verifies the selection, trust, host fit and seal under
    the installer fence and then becomes the plugin's command, terminal inherited."""
    home = _config_home(config_home)
    try:
        connection = read_connection(home, missing=NO_CONNECTION)
        record = read_record(Path(connection.manager_root).parent)
    except PluginRefusal as refusal:
        _fail(refusal.message)
    if record is None or record.profile_id != connection.profile_id:
        _fail(
            "The manager connection is not bound to this host's local service profile: run "
            f"{PROG_NAME} setup before running plugin commands."
        )
    if record.config_home != str(home):
        _fail("The local service profile belongs to another Skulk configuration.")
    command = [
        record.python,
        *(["-I", "-B"] if record.runtime == "staged" else []),
        "-m",
        "skulk.extensions.runtime_manager",
        "launch",
        "--root",
        connection.manager_root,
        "--plugin",
        managed_id,
        "--kind",
        kind,
        "--",
        *arguments,
    ]
    sys.stdout.flush()
    os.execv(command[0], command)


@app.command("setup-plugin")
def setup_plugin(
    managed_id: Annotated[str, typer.Argument(help="The installed managed plugin id.")],
    plugin_arguments: PluginArguments = None,
    config_home: ConfigHomeOption = None,
) -> None:
    """Run the selected release's own local setup (verified first; terminal inherited)."""
    _launch(config_home, managed_id, "setup", plugin_arguments or [])


@app.command("manage-plugin")
def manage_plugin(
    managed_id: Annotated[str, typer.Argument(help="The installed managed plugin id.")],
    plugin_arguments: PluginArguments = None,
    config_home: ConfigHomeOption = None,
) -> None:
    """Run the selected release's own management command (verified first; terminal
    inherited)."""
    _launch(config_home, managed_id, "manage", plugin_arguments or [])


def main() -> None:
    app(prog_name=PROG_NAME)
