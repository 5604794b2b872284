"""Node management in-process: the field-telemetry preview, the tailscale probe and
remote-access URLs, the directory picker's listing, and ``POST /admin/restart``'s
refusals. The restart itself needs a process: ``tests/daemon/test_node_restart.py``."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skulk_core.cluster.remote_access import TailscaleStatus
from skulk_core.diagnostics.bundle import NodeBundle
from skulk_core.ids import NodeId
from skulk_daemon.api.authority import route_authority
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.diagnostics.service import DiagnosticsService
from skulk_daemon.node_admin.service import FIELD_TELEMETRY_INGEST_URL
from skulk_daemon.node_admin.tailscale import TailscaleProbe
from tests.api.in_process import AppFactory, AppNode
from tests.security.test_route_table import _routes

TAILSCALE_RUNNING: dict[str, Any] = {
    "Version": "1.76.1-t5f0a8ba63",
    "BackendState": "Running",
    "Self": {
        "HostName": "my-node",
        "DNSName": "my-node.tailnet-abc.ts.net.",
        "TailscaleIPs": ["fd7a:115c:a1e0::1", "100.101.102.103"],
    },
    "CurrentTailnet": {"Name": "someone@example.com", "MagicDNSSuffix": "tailnet-abc.ts.net"},
}
NULL_FIELDS = {"selfIp": None, "hostname": None, "dnsName": None, "tailnet": None, "version": None}


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"]["code"] == code, body
    return body


# --- authority -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "requirement"),
    [
        ("POST", "/admin/restart", Requirement.TRUSTED_FABRIC),
        ("GET", "/filesystem/browse", Requirement.DIRECT_LOOPBACK),
        ("GET", "/v1/telemetry/preview", Requirement.OPEN),
        ("GET", "/v1/connectivity/tailscale", Requirement.OPEN),
        ("GET", "/v1/connectivity/remote-access", Requirement.OPEN),
    ],
)
def test_node_management_routes_declare_their_authority(
    method: str, path: str, requirement: Requirement
) -> None:
    declared = route_authority(_routes()[(method, path)])
    assert declared is not None and declared.requirement is requirement


# --- field telemetry -----------------------------------------------------------------


def test_telemetry_preview_is_off_and_empty_by_default(bare_app: AppNode) -> None:
    assert bare_app.get("/v1/telemetry/preview").json() == {
        "enabled": False,
        "consent": "unasked",
        "pending": [],
        "dropped_since_start": 0,
        "install_id": "",
        "ingest_url": FIELD_TELEMETRY_INGEST_URL,
    }


def test_telemetry_preview_shows_the_opt_in_and_install_id(make_app: AppFactory) -> None:
    app = make_app(config_yaml="telemetry:\n  enabled: true\n")
    preview = app.get("/v1/telemetry/preview").json()
    node_id = app.get("/node_id").json()
    install_id = app.get("/state").json()["nodeIdentities"][node_id]["nodeInstallId"]
    assert preview["enabled"] is True
    assert preview["consent"] == "granted"
    assert preview["install_id"] == install_id
    assert preview["pending"] == []


# --- tailscale and remote access -----------------------------------------------------


@pytest.fixture
def fake_tailscale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ``tailscale`` on PATH that prints the status document in ``status.json``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    document = bin_dir / "status.json"
    script = bin_dir / "tailscale"
    script.write_text(f'#!/bin/sh\n[ "$1 $2" = "status --json" ] || exit 2\ncat "{document}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield document


def test_without_the_tailscale_binary_it_is_not_running(
    make_app: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing named tailscale here
    app = make_app()
    assert app.get("/v1/connectivity/tailscale").json() == {"running": False, **NULL_FIELDS}
    bundle = app.get("/v1/diagnostics/node").json()
    assert bundle["tailscale"] == {"running": False, **NULL_FIELDS}
    access = app.get("/v1/connectivity/remote-access").json()
    assert access["tailscale"] == {
        "running": False,
        "ip": None,
        "dnsName": None,
        "port": app.port,
        "url": None,
    }
    local = access["local"]
    assert local["port"] == app.port
    if local["ip"] is not None:
        assert local["url"] == f"http://{local['ip']}:{app.port}"
    assert access["preferredUrl"] == local["url"]
    expected = None if local["url"] is None else local["url"] + "/operator"
    assert access["operatorUrl"] == expected


def test_a_running_tailnet_is_read_and_preferred(
    make_app: AppFactory, fake_tailscale: Path
) -> None:
    fake_tailscale.write_text(json.dumps(TAILSCALE_RUNNING))
    app = make_app()
    assert app.get("/v1/connectivity/tailscale").json() == {
        "running": True,
        "selfIp": "100.101.102.103",
        "hostname": "my-node",
        "dnsName": "my-node.tailnet-abc.ts.net",
        "tailnet": "tailnet-abc.ts.net",
        "version": "1.76.1-t5f0a8ba63",
    }
    # The node's diagnostics bundle carries the same tailnet identity.
    bundle = app.get("/v1/diagnostics/node").json()
    assert bundle["tailscale"]["selfIp"] == "100.101.102.103"
    assert bundle["tailscale"]["dnsName"] == "my-node.tailnet-abc.ts.net"
    node_id = app.get("/node_id").json()
    assert app.get("/v1/connectivity/tailscale", params={"node_id": node_id}).json()["running"]
    access = app.get("/v1/connectivity/remote-access").json()
    url = f"http://my-node.tailnet-abc.ts.net:{app.port}"
    assert access["tailscale"] == {
        "running": True,
        "ip": "100.101.102.103",
        "dnsName": "my-node.tailnet-abc.ts.net",
        "port": app.port,
        "url": url,
    }
    assert access["preferredUrl"] == url
    assert access["operatorUrl"] == url + "/operator"


@pytest.mark.parametrize(
    "document",
    [
        json.dumps({**TAILSCALE_RUNNING, "BackendState": "Stopped"}),
        "failed to connect to local tailscaled; it doesn't appear to be running",
        "",
    ],
)
def test_a_stopped_or_unreadable_tailscaled_is_not_running(
    make_app: AppFactory, fake_tailscale: Path, document: str
) -> None:
    fake_tailscale.write_text(document)
    app = make_app()
    assert app.get("/v1/connectivity/tailscale").json() == {"running": False, **NULL_FIELDS}


def test_tailscale_of_an_unknown_node_is_404(bare_app: AppNode) -> None:
    response = bare_app.get("/v1/connectivity/tailscale", params={"node_id": "12D3KooWnope"})
    _error(response, 404, "node_not_found")


# --- filesystem browse ---------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "picker"
    for name in ("models", "Archive", ".hidden"):
        (root / name).mkdir(parents=True)
    (root / "notes.txt").write_text("not a directory")
    (root / "to-models").symlink_to(root / "models")
    (root / "to-etc").symlink_to("/etc")
    assert str(root.resolve()).startswith("/tmp/"), "the test's tree must be under /tmp"
    return root


def test_browse_lists_sorted_visible_child_directories(bare_app: AppNode, tree: Path) -> None:
    listing = bare_app.get("/filesystem/browse", params={"path": str(tree)}).json()
    resolved = tree.resolve()
    assert listing["path"] == str(resolved)
    # a link to a directory is one; the link that leaves the roots is listed by name only
    names = [entry["name"] for entry in listing["directories"]]
    assert names == ["Archive", "models", "to-etc", "to-models"]
    assert listing["directories"][0] == {"name": "Archive", "path": str(resolved / "Archive")}
    assert listing["truncated"] is False


def test_browse_resolves_symlinks_before_checking(bare_app: AppNode, tree: Path) -> None:
    inside = bare_app.get("/filesystem/browse", params={"path": str(tree / "to-models")})
    assert inside.json()["path"] == str((tree / "models").resolve())
    outside = bare_app.get("/filesystem/browse", params={"path": str(tree / "to-etc")})
    _error(outside, 400, "path_not_allowed")


@pytest.mark.parametrize("path", ["/etc", "/", "/tmp/../etc", "/homeless"])
def test_browse_refuses_paths_outside_the_roots(bare_app: AppNode, path: str) -> None:
    _error(bare_app.get("/filesystem/browse", params={"path": path}), 400, "path_not_allowed")


def test_browse_refuses_files_missing_and_relative_paths(bare_app: AppNode, tree: Path) -> None:
    for path, code in (
        (str(tree / "notes.txt"), "not_a_directory"),
        (str(tree / "missing"), "not_a_directory"),
        ("picker/models", "invalid_path"),
    ):
        _error(bare_app.get("/filesystem/browse", params={"path": path}), 400, code)


def test_browse_defaults_to_volumes(bare_app: AppNode) -> None:
    response = bare_app.get("/filesystem/browse")
    if Path("/Volumes").is_dir():
        assert response.json()["path"] == "/Volumes"
    else:
        _error(response, 400, "not_a_directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_browse_without_permission_is_403(bare_app: AppNode, tree: Path) -> None:
    locked = tree / "models"
    locked.chmod(0)
    try:
        response = bare_app.get("/filesystem/browse", params={"path": str(locked)})
    finally:
        locked.chmod(0o700)
    _error(response, 403, "permission_denied")


# --- restart refusals ----------------------------------------------------------------


def test_restart_refuses_both_target_forms(bare_app: AppNode) -> None:
    node_id = bare_app.get("/node_id").json()
    install_id = bare_app.get("/state").json()["nodeIdentities"][node_id]["nodeInstallId"]
    response = bare_app.post(
        "/admin/restart", params={"node_install_id": install_id, "node_id": node_id}
    )
    _error(response, 400, "conflicting_restart_targets")


@pytest.mark.parametrize("form", ["node_install_id", "node_id"])
def test_restart_of_a_missing_target_is_404(bare_app: AppNode, form: str) -> None:
    response = bare_app.post(
        "/admin/restart", params={form: "00000000-0000-4000-8000-0000000000ff"}
    )
    _error(response, 404, "restart_target_not_found")


def test_restart_of_an_ambiguous_install_id_is_409(make_app: AppFactory) -> None:
    app = make_app()
    own = app.node.own_telemetry()
    assert own is not None
    # A second live node reporting this install id: a copied data dir.
    twin = msgspec.structs.replace(own, node_id=NodeId("12D3KooWtwinOfThisNodesDataDir"))
    app.node.record_telemetry(twin)
    try:
        response = app.post(
            "/admin/restart", params={"node_install_id": own.identity.node_install_id}
        )
    finally:
        app.node.forget_telemetry(twin.node_id)
    body = _error(response, 409, "ambiguous_restart_target")
    assert "12D3KooWtwinOfThisNodesDataDir" in body["error"]["message"]


def test_restart_needs_a_node_started_by_serve(bare_app: AppNode) -> None:
    # The in-process app is no process of its own: nothing could re-execute it.
    _error(bare_app.post("/admin/restart"), 503, "restart_unavailable")


def test_restart_statuses_are_documented(bare_app: AppNode) -> None:
    document = bare_app.get("/api/openapi.json").json()
    restart = document["paths"]["/admin/restart"]["post"]
    assert {"200", "400", "404", "409"} <= set(restart["responses"])
    params = {p["name"] for p in restart["parameters"]}
    assert params == {"node_install_id", "node_id"}
    browse = document["paths"]["/filesystem/browse"]["get"]
    assert {"200", "400", "403"} <= set(browse["responses"])


def test_browse_skips_names_json_cannot_carry(bare_app: AppNode, tree: Path) -> None:
    os.mkdir(os.fsencode(tree) + b"/bad-\xff-name")
    names = [
        d["name"]
        for d in bare_app.get("/filesystem/browse", params={"path": str(tree)}).json()[
            "directories"
        ]
    ]
    assert names == ["Archive", "models", "to-etc", "to-models"]
    # Bytes that are no UTF-8 (a lone surrogate, then a stray byte), percent-encoded.
    for raw in ("%2Ftmp%2F%ED%A0%80", "%2Ftmp%2F%FF"):
        answer = bare_app.get(f"/filesystem/browse?path={raw}")
        assert answer.status_code == 400, answer.text


class _BrokenProbe(TailscaleProbe):
    async def status(self) -> TailscaleStatus:
        raise RuntimeError("the probe itself broke")


def test_a_broken_probe_leaves_the_bundle_tailscale_null(bare_app: AppNode) -> None:
    service = DiagnosticsService(bare_app.node, None, tailscale=_BrokenProbe())

    async def bundle() -> NodeBundle:
        return await service.bundle({})

    found = bare_app._test_client.blocking_portal.call(bundle)
    assert found.tailscale is None and found.node_id == bare_app.node.node_id
