"""Finding (issue #36, low): a public caller read absolute paths (the home directory) from
``/store/storage``, the config file's path from ``/config`` and the LAN address from
``/v1/connectivity/remote-access``; LAN callers could list ``/home`` and the temp
directory through ``/filesystem/browse``. Reproduced on a real daemon from another
"machine" (lan.py): a public caller now reads the same fields with those values blanked,
this machine still sees them, and browsing is for this machine only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.daemon_process import DaemonProcess
from tests.security.lan import PRIVATE_HOST, PUBLIC_HOST, Lan

pytestmark = pytest.mark.slow


def body(result: dict[str, Any]) -> Any:
    assert result["status"] == 200, result
    return httpx.Response(200, text=result["body"]).json()


def reads(network: Lan, node: DaemonProcess, host: str) -> list[dict[str, Any]]:
    paths = ("/store/storage", "/config", "/v1/connectivity/remote-access")
    return network.requests(
        *({"method": "GET", "url": f"http://{host}:{node.port}{path}"} for path in paths)
    )


def test_a_public_caller_reads_the_fields_without_host_paths_or_addresses(
    network: Lan, node: DaemonProcess
) -> None:
    storage, config, access = (body(r) for r in reads(network, node, PUBLIC_HOST))
    assert storage["models_dir"] == ""
    assert all(artifact["path"] == "" for artifact in storage["artifacts"])
    assert {"free_bytes", "total_bytes", "node_id"} <= set(storage)
    assert config["path"] == ""
    assert config["effective"]["models_dir"] == "" and config["effective"]["data_dir"] == ""
    assert "model_store" in config["config"]  # the settings themselves are still read
    assert access["local"] == {"ip": None, "port": node.port, "url": None}
    assert access["preferredUrl"] is None and access["operatorUrl"] is None
    assert access["tailscale"]["ip"] is None and access["tailscale"]["url"] is None

    # This machine, and the private network, still see every value.
    mine = node.get("/config").json()
    assert mine["path"].endswith("skulk.yaml") and mine["effective"]["models_dir"]
    assert node.get("/store/storage").json()["models_dir"] == str(node.models_dir)
    lan_storage, lan_config, _ = (body(r) for r in reads(network, node, PRIVATE_HOST))
    assert lan_storage["models_dir"] and lan_config["path"]


def test_only_this_machine_browses_directories(network: Lan, node: DaemonProcess) -> None:
    for host in (PRIVATE_HOST, PUBLIC_HOST):
        (listing,) = network.requests(
            {"method": "GET", "url": f"http://{host}:{node.port}/filesystem/browse?path=/home"}
        )
        assert listing["status"] == 403, listing
        assert "/home/" not in listing["body"]
    assert node.get("/filesystem/browse", params={"path": "/tmp"}).status_code == 200
