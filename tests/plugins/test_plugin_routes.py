"""The managed-plugin HTTP routes on the real in-process app, over a real manager
process and the kit's loopback HTTPS feed: the manager discovered after the app
started (no restart), register, source (direct owner only), release review, install,
activate, the inventories, disable, uninstall and purge, with the spec's statuses
(404, 409, 422, 503) and ``Cache-Control: no-store``; and the authority refusals (a
peer on another network, a forwarded request, a missing dashboard marker, a paired
bearer without the plugin scope or on an owner-only route). The feed bearer never
comes back in a response."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skulk_daemon.operator.service import OperatorPairingService
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from tests.api import app_transport
from tests.api.in_process import AppNode
from tests.daemon.pairing import Device, pair_in_process, set_scopes
from tests.plugins.kit import Feed, Publisher, build_wheel, release_document, trust_document
from tests.plugins.manager_process import Manager

ACME = Publisher("acme")
TOKEN = "route-feed-bearer-which-must-never-come-back-404"
OWNER = {"X-Skulk-Dashboard": "pairing-v1"}
PLUGIN = "managed.routes"
BASE = "/v1/plugins/managed/installations"


def op(n: int) -> str:
    return f"{n:032x}"


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    base = tmp_path_factory.mktemp("route-feed")
    served = Feed(tls_dir=base / "tls", token=TOKEN)
    wheel = build_wheel(base / "wheel")
    served.publish("release.json", ACME.sign(release_document(ACME, [wheel])))
    served.publish_wheel(wheel)
    yield served
    served.close()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppNode]:
    root = tmp_path_factory.mktemp("route-app")
    with AppNode(root=root / "node", models_dir=root / "models") as node:
        yield node


@pytest.fixture(scope="module")
def manager(app: AppNode, feed: Feed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # The app is already serving: setup happens after it, as an owner would do it.
    unset = app.get("/v1/plugins/managed", headers=OWNER)
    assert unset.status_code == 503, unset.text
    assert "skulk-plugin-service setup" in unset.json()["error"]["message"]
    assert unset.headers["cache-control"].startswith("no-store")
    base = tmp_path_factory.mktemp("route-manager")
    ca = base / "ca.pem"
    ca.write_bytes(feed.ca_pem)
    running = Manager(base / "root", "--tls-ca", str(ca)).start()
    write_connection(
        app.config_home,
        ManagerConnection(manager_root=str(running.root), profile_id=op(7)),
    )
    yield
    running.kill()
    assert TOKEN not in running.log


def owner(app: AppNode, method: str, path: str, **kwargs: Any) -> httpx.Response:
    response = app.http.request(method, path, headers=OWNER, **kwargs)
    assert response.headers["cache-control"].startswith("no-store"), (path, response.headers)
    assert TOKEN not in response.text
    return response


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def refused(response: httpx.Response, status: int, fragment: str = "") -> str:
    assert response.status_code == status, response.text
    message = str(response.json()["error"]["message"])
    assert fragment in message, message
    return message


def wait_for(read: Any, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        current = read()
        if current is not None and current["state"] in states:
            return dict(current)
        assert time.monotonic() < deadline, current
        time.sleep(0.2)


def test_install_activate_disable_uninstall_and_purge_over_http(
    app: AppNode, feed: Feed, manager: None
) -> None:
    assert ok(owner(app, "GET", "/v1/plugins/managed")) == {
        "installations": [],
        "reload_runtime": True,
    }
    refused(owner(app, "POST", BASE, json={"plugin_id": "not-managed"}), 422)
    refused(owner(app, "POST", BASE, json={"plugin_id": PLUGIN, "extra": 1}), 422)
    refused(owner(app, "GET", f"{BASE}/managed.nothing"), 404, "No installation")
    refused(owner(app, "GET", f"{BASE}/Not_An_Id"), 422)
    registered = ok(owner(app, "POST", BASE, json={"plugin_id": PLUGIN}))
    assert (registered["plugin_id"], registered["selection"]) == (PLUGIN, None)

    source = {
        "expected_revision": 0,
        "base_url": feed.base_url,
        "trust": trust_document(ACME),
        "token": TOKEN,
    }
    status = ok(owner(app, "POST", f"{BASE}/{PLUGIN}/source", json=source))
    assert (status["revision"], status["credential_ready"]) == (1, True)
    refused(owner(app, "POST", f"{BASE}/{PLUGIN}/source", json=source), 409, "expected_revision")
    assert ok(owner(app, "GET", f"{BASE}/{PLUGIN}/source"))["configured"] is True

    review = ok(owner(app, "GET", f"{BASE}/{PLUGIN}/release"))
    digest = review["runtime_digest"]
    install = {"operation_id": op(1), "runtime_digest": digest, "expected_source_revision": 1}
    assert ok(owner(app, "POST", f"{BASE}/{PLUGIN}/install", json=install))["state"] == "accepted"
    staged = wait_for(
        lambda: ok(owner(app, "GET", f"{BASE}/{PLUGIN}/install"))["operation"],
        ("staged", "recovery_required"),
    )
    assert staged["state"] == "staged", staged
    changed = {**install, "expected_source_revision": 0}
    refused(owner(app, "POST", f"{BASE}/{PLUGIN}/install", json=changed), 409)

    activate = {
        "operation_id": op(2),
        "action": "activate",
        "expected_revision": 0,
        "runtime_digest": digest,
        "accept_permissions": True,
    }
    refused(owner(app, "POST", f"{BASE}/{PLUGIN}/operations", json={**activate, "x": 1}), 422)
    no_digest = {k: v for k, v in activate.items() if k != "runtime_digest"}
    refused(owner(app, "POST", f"{BASE}/{PLUGIN}/operations", json=no_digest), 422)
    ok(owner(app, "POST", f"{BASE}/{PLUGIN}/operations", json=activate))
    operation = f"{BASE}/{PLUGIN}/operations/{op(2)}"
    done = wait_for(lambda: ok(owner(app, "GET", operation)), ("complete", "failed"))
    assert done["state"] == "complete", done
    refused(owner(app, "GET", f"{BASE}/{PLUGIN}/operations/{op(99)}"), 404)
    refused(owner(app, "GET", f"{BASE}/{PLUGIN}/operations/NOTHEX"), 422)
    reused = {**activate, "expected_revision": 1}
    refused(owner(app, "POST", f"{BASE}/{PLUGIN}/operations", json=reused), 409, "another")
    assert ok(owner(app, "POST", f"{operation}/recover"))["state"] == "complete"  # unchanged

    managed = ok(owner(app, "GET", "/v1/plugins/managed"))["installations"]
    assert [i["plugin_id"] for i in managed] == [PLUGIN]
    entry = managed[0]
    assert (entry["enabled"], entry["selected_digest"], entry["selection_revision"]) == (
        True,
        digest,
        1,
    )
    assert entry["release"] == {
        "bundle_id": "acme.tiny",
        "title": "Tiny owner",
        "bundle_version": "1.0.0",
        "publisher": "acme",
        "sequence": 1,
    }
    plugins = ok(owner(app, "GET", "/v1/plugins"))["plugins"]
    assert plugins == [
        {
            "pluginId": PLUGIN,
            "available": True,
            "nodes": [
                {
                    "nodeId": "acme.tiny",
                    "bundleId": "acme.tiny",
                    "version": "1.0.0",
                    "status": "enabled",
                    "configurable": False,
                    "credentialsConfigurable": False,
                }
            ],
        }
    ]

    refused(owner(app, "DELETE", f"{BASE}/{PLUGIN}"), 409, "uninstall it before purging")
    stale = {"operation_id": op(3), "action": "disable", "expected_revision": 0}
    refused(owner(app, "POST", f"{BASE}/{PLUGIN}/operations", json=stale), 409, "revision")
    for n, action in ((4, "disable"), (5, "uninstall")):
        revision = ok(owner(app, "GET", f"{BASE}/{PLUGIN}"))["selection_revision"]
        body = {"operation_id": op(n), "action": action, "expected_revision": revision}
        ok(owner(app, "POST", f"{BASE}/{PLUGIN}/operations", json=body))
        path = f"{BASE}/{PLUGIN}/operations/{op(n)}"
        assert wait_for(lambda p=path: ok(owner(app, "GET", p)), ("complete", "failed"))[
            "state"
        ] == ("complete")
    assert ok(owner(app, "GET", "/v1/plugins"))["plugins"][0]["nodes"][0]["status"] == (
        "uninstalled"
    )
    assert ok(owner(app, "DELETE", f"{BASE}/{PLUGIN}")) == {"plugin_id": PLUGIN, "purged": True}
    refused(owner(app, "GET", f"{BASE}/{PLUGIN}"), 404)
    assert ok(owner(app, "GET", "/v1/plugins")) == {"plugins": []}


def test_authority_refusals(app: AppNode, manager: None, monkeypatch: pytest.MonkeyPatch) -> None:
    path = "/v1/plugins/managed"
    missing = app.get(path)
    refused(missing, 403, "X-Skulk-Dashboard")
    assert "plugins are managed from a browser on this node" in missing.json()["error"]["message"]
    forwarded = app.get(path, headers={**OWNER, "X-Forwarded-For": "203.0.113.9"})
    assert forwarded.status_code == 403, forwarded.text
    # The guard refuses before any handler runs; its refusals are not cacheable either,
    # on every plugin route family.
    for guarded in (path, "/v1/plugins", f"/v1/plugins/{PLUGIN}/nodes/n/configuration"):
        refusal = app.get(guarded, headers={**OWNER, "X-Forwarded-For": "203.0.113.9"})
        assert refusal.status_code == 403, refusal.text
        assert refusal.headers["cache-control"].startswith("no-store"), guarded
    invalid = app.get(path, headers={**OWNER, "Authorization": "Bearer not-a-real-token"})
    assert invalid.status_code == 401, invalid.text  # never falls back to direct authority

    service = OperatorPairingService.open(app.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device())
    bearer = {**OWNER, **device.bearer}
    refused(app.get(path, headers=bearer), 403, "plugins:read")  # pairing grants none
    set_scopes(app.data_dir, device.device_id, ["cluster:read", "plugins:read"])
    assert ok(app.get(path, headers=bearer)) == {"installations": [], "reload_runtime": True}
    refused(
        app.post(BASE, json={"plugin_id": "managed.bearer"}, headers=bearer), 403, "plugins:manage"
    )
    set_scopes(app.data_dir, device.device_id, ["plugins:read", "plugins:manage"])
    owner_only = app.post(
        f"{BASE}/managed.bearer/source", json={"expected_revision": 0}, headers=bearer
    )
    refused(owner_only, 403, "needs direct owner access")
    catalog_only = app.post(
        "/v1/plugins/managed/catalog/source", json={"expected_revision": 0}, headers=bearer
    )
    refused(catalog_only, 403, "needs direct owner access")

    # A socket peer on another network never reaches the handler.
    monkeypatch.setattr(app_transport, "PEER", ("203.0.113.7", 50000))
    remote = app.get(path, headers=OWNER)
    assert remote.status_code == 403, remote.text
    assert remote.headers["cache-control"].startswith("no-store")


def test_plugin_grants_are_explicit_fenced_and_direct_owner_only(
    app: AppNode, manager: None
) -> None:
    service = OperatorPairingService.open(app.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device(name="Grant phone"))
    grants = "/v1/auth/plugin-grants"
    listed = ok(owner(app, "GET", grants))["devices"]
    row = next(d for d in listed if d["deviceId"] == device.device_id)
    assert row == {
        "deviceId": device.device_id,
        "deviceName": "Grant phone",
        "revision": 0,
        "scopes": [],  # pairing grants no plugin scope
        "active": True,
    }
    assert "accessToken" not in str(listed) and device.credentials["accessToken"] not in str(listed)
    path = f"{grants}/{device.device_id}"
    bearer = {**OWNER, **device.bearer}
    refused(app.http.put(path, json={"expectedRevision": 0, "scopes": []}, headers=bearer), 403)
    refused(app.get(grants, headers=bearer), 403, "direct owner access")
    forwarded = {**OWNER, "X-Forwarded-For": "198.51.100.1"}
    grant_refusal = app.get(grants, headers=forwarded)
    assert grant_refusal.status_code == 403
    assert grant_refusal.headers["cache-control"].startswith("no-store")

    granted = ok(owner(app, "PUT", path, json={"expectedRevision": 0, "scopes": ["plugins:read"]}))
    assert (granted["revision"], granted["scopes"]) == (1, ["plugins:read"])
    # The existing token uses the grant at once; the pairing's own scopes are kept.
    assert ok(app.get("/v1/plugins/managed", headers=bearer)) == {
        "installations": [],
        "reload_runtime": True,
    }
    assert {"cluster:read", "plugins:read"} <= service.authenticate(
        device.credentials["accessToken"]
    ).scopes
    refused(owner(app, "PUT", path, json={"expectedRevision": 0, "scopes": []}), 409, "revision")
    for bad in (["plugins:read", "plugins:read"], ["operations:write"]):
        refused(owner(app, "PUT", path, json={"expectedRevision": 1, "scopes": bad}), 422)
    refused(owner(app, "PUT", path, json={"expectedRevision": 1}), 422)
    refused(
        owner(app, "PUT", f"{grants}/no-such-device", json={"expectedRevision": 0, "scopes": []}),
        404,
    )
    revoked = ok(owner(app, "PUT", path, json={"expectedRevision": 1, "scopes": []}))
    assert (revoked["revision"], revoked["scopes"]) == (2, [])
    refused(app.get("/v1/plugins/managed", headers=bearer), 403, "plugins:read")
