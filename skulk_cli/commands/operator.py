"""`skulk operator ...`: pair devices with this gateway, and use a gateway as a paired device.

Gateway side (run on the gateway host; no HTTP route creates pairing material):
`pair`, `invitations list|revoke`, `configure-relay` run the daemon's host tool
(:mod:`skulk_cli.host_tool`). Device side: `connect` pairs this CLI from a payload,
`status` shows the pairing, `devices list|revoke` manage the gateway's devices with
this pairing's bearer, `disconnect` forgets it, and `skulk --operator <command>` sends
any other command through it.
"""

from __future__ import annotations

import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import msgspec
import typer
from rich.text import Text

from skulk_cli import console, render_operator
from skulk_cli.client import JsonObject, SkulkApiError, SkulkUnreachable
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, operator_node_client
from skulk_cli.host_tool import HostToolRefused, run_host_tool
from skulk_cli.operator_credentials import (
    PAIR_AGAIN_HINT,
    CredentialStore,
    CredentialsUnusable,
    NotPaired,
    StoredPairing,
)
from skulk_cli.operator_views import (
    DeviceList,
    InvitationList,
    PairIssued,
    RelayConfigured,
)

T = TypeVar("T")

app = typer.Typer(
    help="Pair devices with this gateway, or use a gateway this CLI is paired with.",
    no_args_is_help=True,
)
invitations_app = typer.Typer(
    help="Reusable pairing invitations on this gateway host.", no_args_is_help=True
)
devices_app = typer.Typer(
    help="The paired gateway's devices (through this CLI's pairing).", no_args_is_help=True
)
app.add_typer(invitations_app, name="invitations")
app.add_typer(devices_app, name="devices")

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        metavar="DIR",
        help="The gateway node's data directory (else SKULK_DATA_DIR, else the node's default).",
    ),
]


def _host(args: list[str], data_dir: Path | None) -> JsonObject:
    try:
        return run_host_tool(args, data_dir=data_dir)
    except HostToolRefused as exc:
        console.error(exc.message)
        raise typer.Exit(EXIT_REFUSED) from None


def _view(raw: JsonObject, view: type[T], what: str) -> T:
    try:
        return msgspec.convert(raw, view)
    except msgspec.ValidationError as exc:
        console.error(f"unexpected answer from {what}: {exc}")
        raise typer.Exit(EXIT_REFUSED) from None


# --- gateway host ----------------------------------------------------------------------


@app.command("pair")
def pair(
    ctx: typer.Context,
    *,
    cluster_name: Annotated[
        str | None,
        typer.Option(
            "--cluster-name",
            metavar="NAME",
            help="The cluster's display name, set when the gateway is first initialized.",
        ),
    ] = None,
    exchange_url: Annotated[
        str | None,
        typer.Option(
            "--exchange-url",
            metavar="URL",
            help="The https:// origin devices pair through, directly or over LAN or "
            "Tailscale (default: this host's operator listener on 127.0.0.1). http:// "
            "only for loopback.",
        ),
    ] = None,
    valid_for: Annotated[
        str | None,
        typer.Option(
            "--valid-for",
            metavar="DURATION",
            help="Make a reusable invitation living this long: a number then m, h or d "
            "(1m through 90d).",
        ),
    ] = None,
    max_pairings: Annotated[
        int | None,
        typer.Option(
            "--max-pairings",
            metavar="N",
            help="Make a reusable invitation for up to N devices (1-20, default 10).",
        ),
    ] = None,
    qr_output: Annotated[
        Path | None,
        typer.Option(
            "--png",
            "--qr-output",
            metavar="PATH",
            help="Also write the QR code as a PNG to this new path (owner-only; never "
            "overwrites): for a terminal too small to show the code.",
        ),
    ] = None,
    data_dir: DataDirOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Create pairing material on this gateway and show it as a QR code.

    Without --valid-for or --max-pairings: a single-use session that expires after
    five minutes. With either: a reusable, revocable invitation. The first run
    initializes the gateway's authority store. The QR code and the `skulk://pair?...`
    payload printed under it are secrets until they expire.
    """
    from skulk_cli import qr  # noqa: PLC0415 - qrcode loads only for pairing
    from skulk_cli.operator_client import decode_payload  # noqa: PLC0415

    if qr_output is not None:
        try:
            qr.refuse_existing(qr_output)  # before anything is created on the gateway
        except qr.QrOutputExists as exc:
            console.error(str(exc))
            raise typer.Exit(EXIT_REFUSED) from None
    args = ["pair"]
    options = (
        ("--cluster-name", cluster_name),
        ("--exchange-url", exchange_url),
        ("--valid-for", valid_for),
        ("--max-pairings", max_pairings),
    )
    for flag, value in options:
        if value is not None:
            args += [flag, str(value)]
    answer = _host(args, data_dir)
    issued = _view(answer, PairIssued, "the host tool")
    if qr_output is not None:
        try:
            qr.write_png(issued.uri, qr_output)
        except (qr.QrOutputExists, OSError) as exc:
            console.error(
                f"could not write the QR image: {exc}",
                hint=_created_hint(issued),
            )
            raise typer.Exit(EXIT_REFUSED) from None
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json(answer)
        return
    package = decode_payload(issued.uri)
    now = datetime.now(UTC)
    console.show(
        render_operator.pair_header(
            issued,
            cluster_name=package.cluster_name,
            cluster_id=package.cluster_id,
            fingerprint=package.fingerprint,
            exchange_url=package.exchange_url,
            now=now,
        )
    )
    console.show(qr.TerminalQr(issued.uri))
    console.show(Text("Payload (for `skulk operator connect`, or to paste into the app):"))
    # Written unwrapped (the terminal folds it), so copying it yields the exact payload.
    line = console.TextStream()
    line.write(issued.uri)
    line.end_line()
    console.show(render_operator.pair_footer(str(qr_output) if qr_output else None))


def _created_hint(issued: PairIssued) -> str:
    if issued.invitation is not None:
        invitation_id = issued.invitation.invitation_id
        return (
            f"The invitation {invitation_id} was created; revoke it with "
            f"`skulk operator invitations revoke {invitation_id}` if it is not wanted."
        )
    return "The single-use session was created and expires in five minutes unused."


@invitations_app.command("list")
def list_invitations(
    ctx: typer.Context, data_dir: DataDirOption = None, json_output: JsonFlag = False
) -> None:
    """List this gateway's invitations: id, times, usage, live attempts and state.

    Never shows an invitation's nonce or payload.
    """
    answer = _host(["invitations", "list"], data_dir)
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json(answer)
        return
    listing = _view(answer, InvitationList, "the host tool")
    console.show(render_operator.invitations(listing, datetime.now(UTC)))


@invitations_app.command("revoke")
def revoke_invitation(
    ctx: typer.Context,
    invitation_id: Annotated[
        str,
        typer.Argument(metavar="INVITATION_ID", help="The invitation's id.", show_default=False),
    ],
    data_dir: DataDirOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Revoke an invitation: no new or unfinished pairing through it succeeds.

    Devices that already paired stay paired; revoke them with `skulk operator devices
    revoke`.
    """
    answer = _host(["invitations", "revoke", invitation_id], data_dir)
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json(answer)
        return
    console.show(Text(f"Revoked invitation {invitation_id}."))


@app.command("configure-relay")
def configure_relay(
    ctx: typer.Context,
    *,
    provisioning_file: Annotated[
        Path,
        typer.Option(
            "--provisioning-file",
            metavar="FILE",
            help="The relay's provisioning JSON (version one or two); a secret.",
            show_default=False,
        ),
    ],
    operator_api_port: Annotated[
        int,
        typer.Option(
            "--operator-api-port",
            metavar="PORT",
            help="The loopback port of the gateway's operator listener (52417).",
            show_default=False,
        ),
    ],
    cluster_name: Annotated[
        str,
        typer.Option(
            "--cluster-name", metavar="NAME", help="The cluster's display name.", show_default=False
        ),
    ],
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace an existing relay configuration.")
    ] = False,
    data_dir: DataDirOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Validate and store relay provisioning in the gateway's encrypted authority store.

    Refuses to replace an existing configuration unless --replace is given. Restart
    the node afterwards so it opens the relay connection.
    """
    args = [
        "configure-relay",
        "--provisioning-file",
        str(provisioning_file),
        "--operator-api-port",
        str(operator_api_port),
        "--cluster-name",
        cluster_name,
    ]
    if replace:
        args.append("--replace")
    answer = _host(args, data_dir)
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json(answer)
        return
    done = _view(answer, RelayConfigured, "the host tool")
    version = f" (provisioning version {done.version})" if done.version else ""
    console.show(Text(f"Relay configured{version}. Restart the node to open the relay."))


# --- paired device ---------------------------------------------------------------------


@app.command("connect")
def connect(
    ctx: typer.Context,
    payload: Annotated[
        str,
        typer.Argument(
            metavar="PAYLOAD",
            help="The `skulk://pair?...` payload; `-` reads it from standard input, which "
            "keeps it out of the process list and shell history.",
            show_default=False,
        ),
    ],
    device_name: Annotated[
        str | None,
        typer.Option(
            "--device-name",
            metavar="NAME",
            help="How the gateway lists this device (1-80 characters; default: this host's name).",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Pair this CLI with a gateway, as a device, from a pairing payload.

    Checks the gateway's TLS key against the payload's fingerprint before sending
    anything, proves possession of a fresh Ed25519 key, and stores the credentials
    and the pinned certificate owner-only in `operator/` under the CLI's config home
    (SKULK_CONFIG_HOME, else ~/.config/skulk). Replaces any earlier pairing.
    """
    from skulk_cli.operator_client import PairingRefused, pair_device  # noqa: PLC0415
    from skulk_core.operator.bounds import normalize_device_name  # noqa: PLC0415

    if payload == "-":
        payload = sys.stdin.readline()
    try:
        name = normalize_device_name(device_name or f"skulk CLI on {socket.gethostname()}")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--device-name'") from None
    store = CredentialStore.default()
    try:
        stored = pair_device(payload, name, store)
    except PairingRefused as exc:
        console.error(f"Not paired: {exc}.")
        raise typer.Exit(EXIT_REFUSED) from None
    except SkulkApiError as exc:
        console.error(f"The gateway refused the pairing (HTTP {exc.status}): {exc.message}")
        raise typer.Exit(EXIT_REFUSED) from None
    except SkulkUnreachable as exc:
        console.error(f"No gateway answering at {exc.base_url} ({exc.reason}).")
        raise typer.Exit(EXIT_REFUSED) from None
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json(_public(stored, store))
        return
    console.show(render_operator.connected(stored))


@app.command("status")
def status(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Show the gateway this CLI is paired with, its device id, scopes and expiries.

    Never shows the tokens. Exits 1 when this CLI is not paired.
    """
    store = CredentialStore.default()
    stored = _load(store)
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json(_public(stored, store))
        return
    console.show(render_operator.pairing(stored, datetime.now(UTC)))


@devices_app.command("list")
def list_devices(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List the paired gateway's devices; `*` marks this one."""
    with operator_node_client() as client:
        answer = client.devices()
        if CliContext.of(ctx).wants_json(json_output):
            console.emit_json(answer)
            return
        console.show(render_operator.devices(_view(answer, DeviceList, "the gateway")))


@devices_app.command("revoke")
def revoke_device(
    ctx: typer.Context,
    device_id: Annotated[
        str, typer.Argument(metavar="DEVICE_ID", help="The device's id.", show_default=False)
    ],
    json_output: JsonFlag = False,
) -> None:
    """Revoke a paired device: both of its credentials stop working at once."""
    store = CredentialStore.default()
    own = _load(store).device_id == device_id
    with operator_node_client(store) as client:
        client.revoke_device(device_id)
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json({"revoked": device_id})
        return
    console.show(Text(f"Revoked device {device_id}."))
    if own:
        console.show(Text(f"That was this CLI's own pairing. {PAIR_AGAIN_HINT}", style="yellow"))


@app.command("disconnect")
def disconnect(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Forget this CLI's pairing and pinned certificate.

    The gateway still lists the device until it is revoked (`skulk operator devices
    revoke DEVICE_ID`, before disconnecting, or from another paired device).
    """
    store = CredentialStore.default()
    existed = store.forget()
    if CliContext.of(ctx).wants_json(json_output):
        console.emit_json({"forgotten": existed})
        return
    console.show(Text("Forgot the pairing." if existed else "This CLI was not paired."))


def _load(store: CredentialStore) -> StoredPairing:
    try:
        return store.load()
    except NotPaired:
        console.error(
            "This CLI is not paired with a gateway.",
            hint="Run `skulk operator connect PAYLOAD` with a payload from `skulk operator pair`.",
        )
        raise typer.Exit(EXIT_REFUSED) from None
    except CredentialsUnusable as exc:
        console.error(f"The stored pairing cannot be used: {exc}.", hint=PAIR_AGAIN_HINT)
        raise typer.Exit(EXIT_REFUSED) from None


def _public(stored: StoredPairing, store: CredentialStore) -> JsonObject:
    """The stored pairing as JSON, without its tokens."""
    document = msgspec.to_builtins(stored)
    assert isinstance(document, dict)
    for secret in ("accessToken", "refreshToken"):
        document.pop(secret, None)
    document["certificatePath"] = str(store.certificate_path)
    return document
