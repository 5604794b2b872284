"""Pure renderers for `skulk operator ...`: views in, rich renderables out.

None of them is given a token or nonce; the pairing payload is printed by the command
itself, as one unwrapped line, so it can be copied exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.operator_credentials import StoredPairing
from skulk_cli.operator_views import Device, DeviceList, InvitationList, PairIssued

_STATE_STYLE = {"active": "green", "revoked": "red", "exhausted": "yellow", "expired": "dim"}


def when(moment: datetime | None) -> str:
    """A moment as UTC to the second, the way every operator table shows it."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when_short(moment: datetime | None) -> str:
    """A moment as UTC to the minute, for table cells (the header says UTC)."""
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def relative(moment: datetime, now: datetime) -> str:
    """``in 4 min``, ``in 89 days``, ``3 min ago``: coarse, for a glance."""
    seconds = (moment - now).total_seconds()
    span = abs(seconds)
    if span < 90:
        amount = f"{span:.0f} s"
    elif span < 90 * 60:
        amount = f"{span / 60:.0f} min"
    elif span < 48 * 3600:
        amount = f"{span / 3600:.0f} h"
    else:
        amount = f"{span / 86400:.0f} days"
    return f"in {amount}" if seconds >= 0 else f"{amount} ago"


def pair_header(
    issued: PairIssued,
    *,
    cluster_name: str,
    cluster_id: str,
    fingerprint: str,
    exchange_url: str,
    now: datetime,
) -> RenderableType:
    """What a freshly issued session or invitation is, above its QR code."""
    lines = [
        Text.assemble(("Cluster      ", "bold"), f"{cluster_name} ({cluster_id})"),
        Text.assemble(("Fingerprint  ", "bold"), fingerprint),
        Text.assemble(("Pairs via    ", "bold"), exchange_url),
        Text.assemble(
            ("Expires      ", "bold"),
            f"{when(issued.expires_at)} ({relative(issued.expires_at, now)})",
        ),
    ]
    invitation = issued.invitation
    if invitation is None:
        lines.append(Text("Single use: the first device to pair with it consumes it.", "dim"))
    else:
        lines += [
            Text.assemble(("Invitation   ", "bold"), invitation.invitation_id),
            Text.assemble(
                ("Limit        ", "bold"),
                f"up to {invitation.max_pairings} device(s); revoke with "
                f"`skulk operator invitations revoke {invitation.invitation_id}`",
            ),
        ]
    return Group(*lines)


def pair_footer(qr_output: str | None) -> RenderableType:
    """The warning under the payload: the QR and payload are bearer secrets."""
    lines = [
        Text(
            "Anyone holding this QR code or payload before it expires can pair a device: "
            "show it only to the device you are pairing, and do not publish it.",
            style="yellow",
        )
    ]
    if qr_output:
        lines.append(Text(f"QR image written to {qr_output} (owner-only); treat it the same."))
    return Group(*lines)


def _compact_table() -> Table:
    # NOTE: rows lead with a 36-character UUID; a light frame leaves the other columns
    # room to stay readable in an 80-column terminal.
    return Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        caption="Times in UTC.",
        caption_justify="left",
    )


def invitations(listing: InvitationList, now: datetime) -> RenderableType:
    """Safe invitation status: id, times, usage, live attempts, state. Never a nonce."""
    if not listing.invitations:
        return Text("No pairing invitations.", style="dim")
    table = _compact_table()
    table.caption = "Times in UTC. Attempts: live/issued."
    # The id stays on one line (to copy into `invitations revoke`), its creation time
    # under it; times fold between date and time. Fits an 80-column terminal.
    table.add_column("Invitation", no_wrap=True)
    table.add_column("Expires", min_width=10)
    table.add_column("Paired", justify="right", no_wrap=True)
    table.add_column("Attempts", justify="right", no_wrap=True)
    table.add_column("State", no_wrap=True)
    for row in listing.invitations:
        expires = when_short(row.expires_at)
        if row.expires_at is not None and row.state == "active":
            expires += f"\n{relative(row.expires_at, now)}"
        table.add_row(
            Text.assemble(row.invitation_id, (f"\ncreated {when_short(row.created_at)}", "dim")),
            expires,
            f"{row.successful_pairings}/{row.max_pairings}",
            f"{row.active_attempts}/{row.total_attempts}",
            Text(row.state, style=_STATE_STYLE.get(row.state, "")),
        )
    return table


def devices(listing: DeviceList) -> RenderableType:
    """The gateway's paired devices; ``*`` marks the caller."""
    if not listing.devices:
        return Text("No paired devices.", style="dim")
    table = _compact_table()
    table.caption = "Times in UTC. * this device."
    table.add_column("Device", no_wrap=True)
    table.add_column("Name", overflow="fold", min_width=8)
    table.add_column("Refresh until", min_width=10)
    table.add_column("State", min_width=10)
    for device in listing.devices:
        table.add_row(
            Text.assemble(
                device.device_id + (" *" if device.current else ""),
                (f"\npaired {when_short(device.paired_at)}", "dim"),
            ),
            device.device_name,
            when_short(device.refresh_token_expires_at),
            _device_state(device),
        )
    return table


def _device_state(device: Device) -> Text:
    if device.active:
        return Text("active", style="green")
    if device.revoked_at is not None:
        return Text(f"revoked {when_short(device.revoked_at)}", style="red")
    return Text("inactive", style="dim")


def pairing(stored: StoredPairing, now: datetime) -> RenderableType:
    """`skulk operator status`: the stored pairing, without its tokens."""
    access = f"{when(stored.access_expires_at)} ({relative(stored.access_expires_at, now)})"
    if stored.access_expires_at <= now:
        access += ", renewed on next use"
    refresh = f"{when(stored.refresh_expires_at)} ({relative(stored.refresh_expires_at, now)})"
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows = (
        ("Cluster", f"{stored.cluster_name or '-'} ({stored.cluster_id})"),
        ("Gateway", stored.operator_url),
        ("Fingerprint", stored.fingerprint),
        ("Device", f"{stored.device_name} ({stored.device_id})"),
        ("Paired", when(stored.paired_at)),
        ("Scopes", ", ".join(stored.scopes) or "-"),
        ("Access until", access),
        ("Pairing until", refresh),
    )
    for label, value in rows:
        table.add_row(label, value)
    return table


def connected(stored: StoredPairing) -> Text:
    """The line `skulk operator connect` ends with."""
    return Text.assemble(
        ("Paired ", "green"),
        f"as {stored.device_name!r} (device {stored.device_id}) with cluster "
        f"{stored.cluster_name or stored.cluster_id} at {stored.operator_url}. "
        "Use `skulk --operator <command>` to reach it.",
    )
