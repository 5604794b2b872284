"""A fake ``tailscale`` CLI for daemons: there is no tailscale on this machine, so a
node that should have a tailnet identity finds this script first on its PATH; it
prints a running ``status --json`` document (the seam the probe reads)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any, Final

STATUS: Final[dict[str, Any]] = {
    "Version": "1.76.1-t5f0a8ba63",
    "BackendState": "Running",
    "Self": {
        "HostName": "node-c",
        "DNSName": "node-c.tailnet-abc.ts.net.",
        "TailscaleIPs": ["100.64.0.42"],
    },
    "CurrentTailnet": {"Name": "someone@example.com", "MagicDNSSuffix": "tailnet-abc.ts.net"},
}
TAILNET_STATUS: Final[dict[str, Any]] = {
    "running": True,
    "selfIp": "100.64.0.42",
    "hostname": "node-c",
    "dnsName": "node-c.tailnet-abc.ts.net",
    "tailnet": "tailnet-abc.ts.net",
    "version": "1.76.1-t5f0a8ba63",
}
"""What a node's bundle reports from :data:`STATUS`."""


def fake_tailscale(bin_dir: Path) -> Path:
    """``bin_dir`` holding the fake ``tailscale``; put it first on a daemon's PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    document = bin_dir / "status.json"
    document.write_text(json.dumps(STATUS))
    script = bin_dir / "tailscale"
    script.write_text(f'#!/bin/sh\n[ "$1 $2" = "status --json" ] || exit 2\ncat "{document}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir
