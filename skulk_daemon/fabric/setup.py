"""Resolve the fabric's settings from flags, environment and ``skulk.yaml``.

Precedence, as for every other setting: flag, then ``SKULK_*`` environment, then
the config file. Peers from all three are merged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from skulk_core.config import ClusterConfig
from skulk_daemon.fabric.peers import parse_peer
from skulk_daemon.fabric.settings import FabricSettings

FABRIC_PORT_ENV = "SKULK_FABRIC_PORT"
PEERS_ENV = "SKULK_PEERS"
MDNS_ENV = "SKULK_MDNS"
FORCE_MASTER_ENV = "SKULK_FORCE_MASTER"


def _truthy(raw: str | None) -> bool | None:
    if raw is None or not raw.strip():
        return None
    return raw.strip().lower() not in ("0", "false", "no", "off")


def resolve_fabric(
    *,
    bind_host: str,
    config: ClusterConfig,
    port: int | None = None,
    peers: Sequence[str] = (),
    force_master: bool = False,
    no_mdns: bool = False,
) -> tuple[FabricSettings, bool]:
    """The fabric settings and whether mDNS discovery runs; raises ``ValueError``."""
    env = os.environ
    if port is None:
        raw = env.get(FABRIC_PORT_ENV)
        if raw:
            if not raw.isdigit() or not 0 < int(raw) < 65536:
                raise ValueError(f"{FABRIC_PORT_ENV} must be a port number, got {raw!r}")
            port = int(raw)
        else:
            port = config.fabric_port
    elif not 0 <= port < 65536:
        raise ValueError(f"--fabric-port must be between 1 and 65535, got {port}")
    listed = [*peers, *(p for p in env.get(PEERS_ENV, "").split(",") if p.strip()), *config.peers]
    parsed = tuple(dict.fromkeys(parse_peer(p) for p in listed))
    mdns = not no_mdns and _truthy(env.get(MDNS_ENV)) is not False and config.mdns
    forced = force_master or bool(_truthy(env.get(FORCE_MASTER_ENV)))
    grace = 2.0 if parsed or mdns else 0.0
    settings = FabricSettings(
        bind_host=bind_host,
        port=port,
        peers=parsed,
        force_master=forced,
        discovery_grace_seconds=grace,
    )
    return settings, mdns
