"""The node diagnostics bundle's Tailscale block through the cluster proxy, with real
daemons: the block describes the node the bundle is about, probed there, not the node
that served the request. Tailscale is absent on this machine; the seam is a
``tailscale`` executable on one daemon's PATH that prints a ``status --json``
document, so one node has a tailnet identity and the other honestly has none."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

STATUS = {
    "Version": "1.76.1-t5f0a8ba63",
    "BackendState": "Running",
    "Self": {
        "HostName": "node-b",
        "DNSName": "node-b.tailnet-abc.ts.net.",
        "TailscaleIPs": ["100.64.0.42"],
    },
    "CurrentTailnet": {"Name": "someone@example.com", "MagicDNSSuffix": "tailnet-abc.ts.net"},
}


def fake_tailscale(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True)
    document = bin_dir / "status.json"
    document.write_text(json.dumps(STATUS))
    script = bin_dir / "tailscale"
    script.write_text(f'#!/bin/sh\n[ "$1 $2" = "status --json" ] || exit 2\ncat "{document}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[list[DaemonProcess]]:
    root = tmp_path_factory.mktemp("tailnet")
    path = f"{fake_tailscale(root / 'bin')}{os.pathsep}{os.environ['PATH']}"
    first = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    second = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        peers=[first.fabric_address],
        extra_env={"PATH": path},
    )
    try:
        first.start()
        second.start()
        wait_for(lambda: converged([first, second], 2), "two nodes to converge", timeout=60)
        yield [first, second]
    finally:
        first.kill()
        second.kill()


def test_the_cluster_proxy_reports_the_selected_nodes_tailnet(pair: list[DaemonProcess]) -> None:
    plain, tailnet = pair
    other = node_id(tailnet)
    proxied = plain.get(f"/v1/diagnostics/cluster/{other}")
    assert proxied.status_code == 200, proxied.text
    bundle = proxied.json()
    assert bundle["nodeId"] == other
    assert bundle["tailscale"] == {
        "running": True,
        "selfIp": "100.64.0.42",
        "hostname": "node-b",
        "dnsName": "node-b.tailnet-abc.ts.net",
        "tailnet": "tailnet-abc.ts.net",
        "version": "1.76.1-t5f0a8ba63",
    }
    # The node that served the request has no tailscale CLI: its own block says so.
    own = plain.get("/v1/diagnostics/node").json()["tailscale"]
    assert own["running"] is False and own["selfIp"] is None
    back = tailnet.get(f"/v1/diagnostics/cluster/{node_id(plain)}").json()["tailscale"]
    assert back["running"] is False
