"""Reading ``tailscale status --json`` and the addresses a dashboard can be reached on.

Pure: the daemon runs the probe (``skulk_daemon/node_admin/tailscale.py``) and hands
its output here. The wire shapes are ``GET /v1/connectivity/tailscale`` and
``GET /v1/connectivity/remote-access`` as the spec names their fields.
"""

from __future__ import annotations

import ipaddress
from typing import Final

import msgspec

OPERATOR_PATH: Final = "/operator"
RUNNING_STATE: Final = "Running"
"""``BackendState`` when tailscaled is connected to its tailnet."""


class TailscaleStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Every field but ``running`` is null unless tailscaled is running."""

    running: bool
    self_ip: str | None = None
    hostname: str | None = None
    dns_name: str | None = None
    tailnet: str | None = None
    version: str | None = None


NOT_RUNNING: Final = TailscaleStatus(running=False)


class _Self(msgspec.Struct, frozen=True, rename="pascal"):
    host_name: str | None = None
    # Tailscale spells these two with an all-caps acronym.
    dns_name: str | None = msgspec.field(default=None, name="DNSName")
    tailscale_ips: list[str] | None = msgspec.field(default=None, name="TailscaleIPs")


class _Tailnet(msgspec.Struct, frozen=True, rename="pascal"):
    name: str | None = None


class _Status(msgspec.Struct, frozen=True, rename="pascal"):
    backend_state: str | None = None
    version: str | None = None
    self_node: _Self | None = msgspec.field(default=None, name="Self")
    current_tailnet: _Tailnet | None = None


_status_decoder: Final = msgspec.json.Decoder(_Status)


def parse_tailscale_status(raw: bytes) -> TailscaleStatus:
    """What ``tailscale status --json`` says about this node; a document that is not
    one (or says the backend is not running) reads as not running."""
    try:
        status = _status_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return NOT_RUNNING
    if status.backend_state != RUNNING_STATE:
        return NOT_RUNNING
    me = status.self_node or _Self()
    dns_name = (me.dns_name or "").rstrip(".") or None
    return TailscaleStatus(
        running=True,
        self_ip=_first_ipv4(me.tailscale_ips or []),
        hostname=me.host_name or None,
        dns_name=dns_name,
        tailnet=_tailnet(dns_name, status.current_tailnet),
        version=status.version or None,
    )


def _first_ipv4(addresses: list[str]) -> str | None:
    for address in addresses:
        try:
            if isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address):
                return address
        except ValueError:
            continue
    return None


def _tailnet(dns_name: str | None, current: _Tailnet | None) -> str | None:
    # The MagicDNS name is <host>.<tailnet domain>; the domain is the tailnet's name.
    if dns_name is not None and "." in dns_name:
        return dns_name.split(".", 1)[1]
    return current.name if current is not None and current.name else None


class LocalAccess(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    ip: str | None
    port: int
    url: str | None


class TailscaleAccess(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    running: bool
    ip: str | None
    dns_name: str | None
    port: int
    url: str | None


class RemoteAccess(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    local: LocalAccess
    tailscale: TailscaleAccess
    preferred_url: str | None
    operator_url: str | None


def _url(host: str | None, port: int) -> str | None:
    if host is None:
        return None
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def remote_access(lan_ip: str | None, port: int, tailscale: TailscaleStatus) -> RemoteAccess:
    """The LAN and tailnet URLs of this node's API; the tailnet is preferred when
    connected (its MagicDNS name over its 100.x address), else the LAN."""
    local = LocalAccess(ip=lan_ip, port=port, url=_url(lan_ip, port))
    tail_host = (tailscale.dns_name or tailscale.self_ip) if tailscale.running else None
    tail = TailscaleAccess(
        running=tailscale.running,
        ip=tailscale.self_ip if tailscale.running else None,
        dns_name=tailscale.dns_name if tailscale.running else None,
        port=port,
        url=_url(tail_host, port),
    )
    preferred = tail.url or local.url
    return RemoteAccess(
        local=local,
        tailscale=tail,
        preferred_url=preferred,
        operator_url=preferred + OPERATOR_PATH if preferred is not None else None,
    )
