"""Finding (issue #36, low): a public caller read absolute paths (the home directory) from
``/store/storage``, the config file's path from ``/config`` and the LAN address from
``/v1/connectivity/remote-access``; LAN callers could list ``/home`` and the temp
directory through ``/filesystem/browse``. Reproduced on a real daemon from another
"machine" (lan.py): a public caller now reads the same fields with those values blanked,
this machine still sees them, and browsing is for this machine only."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_daemon.api.authority import route_authority
from skulk_daemon.authority.policy import Requirement
from tests.daemon_process import DaemonProcess
from tests.security.lan import CGNAT_HOST, PRIVATE_HOST, PUBLIC_HOST, Lan
from tests.security.test_route_table import _routes

# NOTE: the "network" group: tests/security/lan.py's LAN has fixed addresses, and two
# made at once on two workers route each other's replies astray (connects timed out).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]


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
    temp = tempfile.gettempdir()
    for host in (PRIVATE_HOST, CGNAT_HOST, PUBLIC_HOST):
        for path in ("/home", temp):
            (listing,) = network.requests(
                {"method": "GET", "url": f"http://{host}:{node.port}/filesystem/browse?path={path}"}
            )
            assert listing["status"] == 403, listing
            assert f"{path}/" not in listing["body"]
    assert node.get("/filesystem/browse", params={"path": "/tmp"}).status_code == 200


NETWORK_READS = {"/models/search", "/models/gguf-quants", "/models/requirements"}
"""Open reads that ask Hugging Face (no internet here) or need query parameters."""


def test_no_open_read_shows_a_public_caller_host_paths_or_lan_addresses(
    network: Lan, node: DaemonProcess
) -> None:
    # Every read a public caller may make (the open GET routes without path
    # parameters), searched for what identifies this machine's disk or its network.
    paths = [
        route
        for (method, route), handler in sorted(_routes().items())
        if method == "GET"
        and "{" not in route
        and route not in NETWORK_READS
        and (declared := route_authority(handler)) is not None
        and declared.requirement is Requirement.OPEN
    ]
    assert len(paths) > 30
    secrets = {
        str(node.root),
        str(node.models_dir),
        str(node.config_home),
        str(Path.home()) + "/",
        tempfile.gettempdir() + "/",
        PRIVATE_HOST,
        CGNAT_HOST,
    }
    answers = network.requests(
        *({"method": "GET", "url": f"http://{PUBLIC_HOST}:{node.port}{path}"} for path in paths)
    )
    leaks = [
        (path, answer["status"], secret)
        for path, answer in zip(paths, answers, strict=True)
        for secret in secrets
        if secret in answer["body"]
    ]
    assert leaks == [], leaks
    failed = [
        (path, answer["status"], answer["body"][:200])
        for path, answer in zip(paths, answers, strict=True)
        if answer["status"] is None
        or (answer["status"] >= 500 and "store_not_configured" not in answer["body"])
    ]
    assert failed == []
