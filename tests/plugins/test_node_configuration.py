"""Node configuration and credentials through the real in-process app: a managed owner
(the ``settings-echo`` fixture, installed from the kit's signed release and activated
through a real manager set up after the app started) reached through the owner
adapter, and an in-process ``NodeConfigurationProvider`` registered as the extension
host registers one. Round trips with both fences (409 on a stale revision or schema
digest), 404/422 refusals, the write-only credential (never echoed: not in answers, the
manager's or the owner's log, or any log record), operation-id replay and changed
intent, the unsupported facet, the authority rules and ``Cache-Control: no-store`` on
every answer, refusals included; the read-only preflight and public setup files, each
404 where the node does not declare it and 409 for an invalid answer; and the read-only
proposal review (exact id and digest, 409 for a changed reference, 422 malformed); the
durable setup actions (fences, operation-id replay and changed intent, the 16 KiB
intent bound, resume without replacement fields, ``plugins:approve`` where required);
the dispatch bound (eight in flight, then 429) and deadline (504)."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import msgspec
import pytest

from skulk_core.extensions.node_setup import SetupArtifact
from skulk_core.extensions.setup_actions import (
    NodeSetupActions,
    SetupAction,
    SetupOperation,
    SetupStart,
)
from skulk_core.plugins.node_configuration import (
    ConfigurableNode,
    NodeConfiguration,
    NodeConfigurationRefused,
    UnknownNode,
)
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.plugins import configuration
from skulk_daemon.plugins.configuration import (
    MAX_IN_FLIGHT,
    ConfigurationFailure,
    NodeConfigurations,
)
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from tests import log_secrets
from tests.api.in_process import AppNode
from tests.daemon.pairing import Device, pair_in_process, set_scopes
from tests.plugins.kit import Feed, Publisher
from tests.plugins.manager_process import Manager
from tests.plugins.owner_kit import FIXTURE, install_owner, publish_owner, settle

ACME = Publisher("acme")
TOKEN = "node-config-feed-bearer-never-echoed-5521"
SECRET = "sk-live-owner-credential-never-echoed-9f2c1d"
OTHER_SECRET = "sk-live-second-credential-never-echoed-31ab"
OWNER = {"X-Skulk-Dashboard": "pairing-v1"}
PLUGIN = "managed.echo"
NODE = f"/v1/plugins/{PLUGIN}/nodes/echo-1"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppNode]:
    root = tmp_path_factory.mktemp("config-app")
    with AppNode(root=root / "node", models_dir=root / "models") as node:
        yield node


@pytest.fixture(scope="module")
def manager(app: AppNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    log_secrets.register("credential", SECRET, OTHER_SECRET)
    base = tmp_path_factory.mktemp("config-manager")
    feed = Feed(tls_dir=base / "tls", token=TOKEN)
    publish_owner(feed, ACME, base / "wheel")
    ca = base / "ca.pem"
    ca.write_bytes(feed.ca_pem)
    running = Manager(base / "root", "--tls-ca", str(ca)).start()
    log_secrets.watch_log(base / "manager.log")
    # The app is already serving: the connection appears after it (no restart).
    write_connection(
        app.config_home, ManagerConnection(manager_root=str(running.root), profile_id="a" * 32)
    )
    install_owner(running, feed, ACME, PLUGIN, TOKEN)
    log_secrets.watch_log(running.root / "installations" / PLUGIN / "owner.log")
    settle(
        lambda: (_listed(app), running(action="get", plugin_id=PLUGIN)),
        lambda seen: seen[0] is not None and seen[0]["nodes"][0]["nodeId"] == "echo-1",
        timeout=30,
    )
    yield running
    running.kill()
    feed.close()
    owner_log = (running.root / "installations" / PLUGIN / "owner.log").read_text()
    for secret in (SECRET, OTHER_SECRET, TOKEN):
        assert secret not in running.log and secret not in owner_log


def _listed(app: AppNode) -> dict[str, Any] | None:
    plugins = owner(app, "GET", "/v1/plugins").json()["plugins"]
    return next((p for p in plugins if p["pluginId"] == PLUGIN and p["nodes"]), None)


def owner(app: AppNode, method: str, path: str, **kwargs: Any) -> httpx.Response:
    response = app.http.request(method, path, headers=OWNER, **kwargs)
    assert response.headers["cache-control"].startswith("no-store"), (path, response.headers)
    for secret in (SECRET, OTHER_SECRET, TOKEN):
        assert secret not in response.text
    return response


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def refused(response: httpx.Response, status: int, fragment: str = "") -> str:
    assert response.status_code == status, response.text
    message = str(response.json()["error"]["message"])
    assert fragment in message, message
    return message


def test_managed_configuration_round_trip_with_fences(app: AppNode, manager: Manager) -> None:
    listed = _listed(app)
    assert listed == {
        "pluginId": PLUGIN,
        "available": True,
        "nodes": [
            {
                "nodeId": "echo-1",
                "bundleId": "skulk-settings-echo",
                "version": "1.0.0",
                "status": "disabled",
                "configurable": True,
                "credentialsConfigurable": True,
                # The owner implements preflight and proposal review (and declares the
                # latter on its node); it has no setup files or setup actions.
                "preflightAvailable": True,
                "setupAvailable": False,
                "setupActionsAvailable": False,
                "proposalsAvailable": True,
                "proposalActionsAvailable": False,
            }
        ],
    }
    config = ok(owner(app, "GET", f"{NODE}/configuration"))
    assert (config["nodeId"], config["revision"], config["enabled"]) == ("echo-1", 1, False)
    assert config["values"] == {"prefix": "echo: "}
    assert config["configurationSchema"]["required"] == ["prefix"]
    digest = config["schemaDigest"]
    fences = {"expectedRevision": 1, "expectedSchemaDigest": digest}

    validated = ok(
        owner(
            app,
            "POST",
            f"{NODE}/configuration",
            json={"operation": "validate", "values": {"prefix": "v: "}, **fences},
        )
    )
    assert validated["validated"] is True and validated["configuration"]["revision"] == 1
    edited = ok(
        owner(
            app,
            "POST",
            f"{NODE}/configuration",
            json={"operation": "edit", "values": {"prefix": "hi: "}, **fences},
        )
    )["configuration"]
    assert (edited["revision"], edited["values"]) == (2, {"prefix": "hi: "})
    # A stale revision, a changed schema digest: 409, nothing written.
    stale = {"operation": "edit", "values": {"prefix": "late"}, **fences}
    refused(owner(app, "POST", f"{NODE}/configuration", json=stale), 409, "revision")
    wrong_schema = {**stale, "expectedRevision": 2, "expectedSchemaDigest": "0" * 64}
    refused(owner(app, "POST", f"{NODE}/configuration", json=wrong_schema), 409, "schema")
    too_long = {**stale, "expectedRevision": 2, "values": {"prefix": "x" * 40}}
    refused(owner(app, "POST", f"{NODE}/configuration", json=too_long), 409, "prefix")
    assert ok(owner(app, "GET", f"{NODE}/configuration"))["revision"] == 2
    # Malformed: values missing for an edit, values on enable, an unknown field.
    now = {"expectedRevision": 2, "expectedSchemaDigest": digest}
    for body in (
        {"operation": "edit", **now},
        {"operation": "enable", "values": {}, **now},
        {"operation": "enable", "extra": 1, **now},
        {"operation": "launch", **now},
        {"operation": "enable", "expectedRevision": 2, "expectedSchemaDigest": "nothex"},
    ):
        refused(owner(app, "POST", f"{NODE}/configuration", json=body), 422)
    enabled = ok(owner(app, "POST", f"{NODE}/configuration", json={"operation": "enable", **now}))[
        "configuration"
    ]
    assert (enabled["enabled"], enabled["revision"]) == (True, 3)
    # The inventory follows within a poll (the owner's description changed).
    settle(lambda: _listed(app), lambda p: p["nodes"][0]["status"] == "ready", timeout=10)
    disable = {"operation": "disable", "expectedRevision": 3, "expectedSchemaDigest": digest}
    assert (
        ok(owner(app, "POST", f"{NODE}/configuration", json=disable))["configuration"]["enabled"]
        is False
    )

    refused(owner(app, "GET", f"/v1/plugins/{PLUGIN}/nodes/echo-9/configuration"), 404)
    refused(owner(app, "GET", "/v1/plugins/managed.nobody/nodes/echo-1/configuration"), 404)
    refused(owner(app, "GET", f"/v1/plugins/{PLUGIN}/nodes/bad%20id/configuration"), 422)


def test_credentials_are_write_only_and_deduplicated(app: AppNode, manager: Manager) -> None:
    metadata = ok(owner(app, "GET", f"{NODE}/credentials"))
    assert metadata["nodeId"] == "echo-1" and metadata["revision"] == 0
    assert metadata["credentials"] == [
        {
            "credentialId": "api_key",
            "title": "API key",
            "description": "",
            "required": True,
            "ready": False,
        }
    ]
    fences = {"expectedRevision": 0, "expectedSchemaDigest": metadata["schemaDigest"]}
    replace = {
        "operation": "replace",
        "operationId": "c" * 32,
        "credentialId": "api_key",
        "value": SECRET,
        **fences,
    }
    stored = ok(owner(app, "POST", f"{NODE}/credentials", json=replace))
    assert stored["revision"] == 1 and stored["credentials"][0]["ready"] is True
    # The exact operation again observes the retained result (no second write) ...
    assert ok(owner(app, "POST", f"{NODE}/credentials", json=replace))["revision"] == 1
    # ... the same id with another value is changed intent: refused.
    changed = {**replace, "value": OTHER_SECRET}
    refused(owner(app, "POST", f"{NODE}/credentials", json=changed), 409, "another change")
    assert ok(owner(app, "GET", f"{NODE}/credentials"))["revision"] == 1
    # Bounds and shapes: 422, the value never repeated.
    for body in (
        {**replace, "operationId": "d" * 32, "value": "x" * 4097},
        {**replace, "operationId": "d" * 32, "value": ""},
        {**replace, "operationId": "NOT-HEX"},
        {**replace, "operation": "retire", "operationId": "d" * 32},
    ):
        message = refused(owner(app, "POST", f"{NODE}/credentials", json=body), 422)
        assert "x" * 64 not in message
    retire = {
        "operation": "retire",
        "operationId": "e" * 32,
        "credentialId": "api_key",
        "expectedRevision": 1,
        "expectedSchemaDigest": metadata["schemaDigest"],
    }
    retired = ok(owner(app, "POST", f"{NODE}/credentials", json=retire))
    assert retired["revision"] == 2 and retired["credentials"][0]["ready"] is False
    # Nothing under the manager root holds the value (the owner keeps digests only).
    assert not [
        p for p in manager.root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()
    ]


class _SettingsOnly:
    """An in-process provider with ordinary settings and no credential facet."""

    schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"n": {"type": "integer"}}}

    async def configuration_nodes(self) -> list[ConfigurableNode]:
        return [ConfigurableNode(node_id="n-1", bundle_id="b", version="1", status="ready")]

    async def node_configuration(self, node_id: str) -> NodeConfiguration:
        return NodeConfiguration(
            node_id="n-1",
            revision=1,
            schema_digest="a" * 64,
            configuration_schema=self.schema,
            values={"n": 1},
            enabled=True,
        )

    async def configure_node(self, node_id: str, mutation: Any) -> Any:
        raise AssertionError("not reached in this test")


def test_in_process_providers_share_the_routes(app: AppNode, manager: Manager) -> None:
    sys.path.insert(0, str(FIXTURE.parent))
    try:
        extension = importlib.import_module("skulk_settings_echo").SettingsEchoExtension()
    finally:
        sys.path.remove(str(FIXTURE.parent))
        sys.modules.pop("skulk_settings_echo", None)
    registry = NodeConfigurations.for_node(app.node)
    assert registry.add_in_process("settings-echo", extension)
    assert registry.add_in_process("settings-only", _SettingsOnly())
    assert not registry.add_in_process("no-facet", object())
    plugins = {p["pluginId"]: p for p in ok(owner(app, "GET", "/v1/plugins"))["plugins"]}
    assert {"settings-echo", "settings-only", PLUGIN} <= set(plugins)
    assert plugins["settings-only"]["nodes"][0]["credentialsConfigurable"] is False
    path = "/v1/plugins/settings-echo/nodes/echo-1/configuration"
    config = ok(owner(app, "GET", path))
    body = {
        "operation": "edit",
        "values": {"prefix": ">> "},
        "expectedRevision": config["revision"],
        "expectedSchemaDigest": config["schemaDigest"],
    }
    assert ok(owner(app, "POST", path, json=body))["configuration"]["values"] == {"prefix": ">> "}
    refused(owner(app, "POST", path, json=body), 409)
    # The facet a node does not declare: 404.
    refused(owner(app, "GET", "/v1/plugins/settings-only/nodes/n-1/credentials"), 404)
    # A schema declaring a password field is refused, not served.
    _SettingsOnly.schema = {"type": "object", "properties": {"pw": {"format": "password"}}}
    refused(owner(app, "GET", "/v1/plugins/settings-only/nodes/n-1/configuration"), 409)


class _WithSetup(_SettingsOnly):
    """Adds public setup files (declared through ``setup_available``)."""

    artifacts: ClassVar[list[SetupArtifact]] = [
        SetupArtifact(name="peer.json", title="Peer", media_type="application/json", content="{}")
    ]

    async def configuration_nodes(self) -> list[ConfigurableNode]:
        return [
            ConfigurableNode(
                node_id="n-1", bundle_id="b", version="1", status="ready", setup_available=True
            )
        ]

    async def node_setup(self, node_id: str) -> Any:
        # NOTE: a plain dict: an answer is checked as the spec types it, whoever built it.
        return {
            "nodeId": node_id,
            "revision": 1,
            "schemaDigest": "a" * 64,
            "credentialRevision": 0,
            "artifacts": [msgspec.to_builtins(a) for a in self.artifacts],
        }


def test_preflight_and_setup_files(app: AppNode, manager: Manager) -> None:
    # The managed owner declares preflight (written against skulk.extensions.setup).
    checked = ok(owner(app, "GET", f"{NODE}/preflight"))
    assert checked["nodeId"] == "echo-1" and len(checked["valuesDigest"]) == 64
    assert {c["code"]: c["passed"] for c in checked["checks"]} == {
        "prefix_set": True,
        "api_key_ready": False,  # retired by the credential test
    }
    assert checked["credentialRevision"] == 2
    # It declares no setup files: 404.
    refused(owner(app, "GET", f"{NODE}/setup"), 404, "setup")
    registry = NodeConfigurations.for_node(app.node)
    assert registry.add_in_process("with-setup", _WithSetup())
    plugins = {p["pluginId"]: p for p in ok(owner(app, "GET", "/v1/plugins"))["plugins"]}
    flags = plugins["with-setup"]["nodes"][0]
    assert (flags["setupAvailable"], flags["preflightAvailable"]) == (True, False)
    files = ok(owner(app, "GET", "/v1/plugins/with-setup/nodes/n-1/setup"))
    assert files["artifacts"] == [
        {"name": "peer.json", "title": "Peer", "mediaType": "application/json", "content": "{}"}
    ]
    refused(owner(app, "GET", "/v1/plugins/with-setup/nodes/n-1/preflight"), 404)
    # Invalid answers are refused (409): duplicate names, an oversized file.
    _WithSetup.artifacts = [_WithSetup.artifacts[0]] * 2
    refused(owner(app, "GET", "/v1/plugins/with-setup/nodes/n-1/setup"), 409, "invalid")
    _WithSetup.artifacts = [
        SetupArtifact(name="big.txt", title="Big", media_type="text/plain", content="x" * 16385)
    ]
    refused(owner(app, "GET", "/v1/plugins/with-setup/nodes/n-1/setup"), 409, "invalid")


def test_proposal_review_is_read_only_and_exact(app: AppNode, manager: Manager) -> None:
    page = ok(owner(app, "GET", f"{NODE}/proposals"))
    assert [p["reference"]["proposalId"] for p in page["proposals"]] == ["p-1"]
    assert page["proposals"][0]["reference"]["pluginId"] == PLUGIN
    assert ok(owner(app, "GET", f"{NODE}/proposals", params={"offset": 1}))["proposals"] == []
    for offset in ("128", "-1", "x"):
        refused(owner(app, "GET", f"{NODE}/proposals", params={"offset": offset}), 422)
    review = ok(owner(app, "GET", f"{NODE}/proposals/p-1", params={"proposal_digest": "d" * 64}))
    assert review["fields"] == [{"label": "Price", "value": "0 credits"}]
    assert review["proposal"]["summary"] == "Rent one echo box for an hour"
    changed = owner(app, "GET", f"{NODE}/proposals/p-1", params={"proposal_digest": "e" * 64})
    refused(changed, 409, "no retained proposal")
    refused(owner(app, "GET", f"{NODE}/proposals/p-1"), 422, "proposal_digest")
    refused(owner(app, "GET", f"{NODE}/proposals/p%201", params={"proposal_digest": "d" * 64}), 422)
    refused(owner(app, "GET", "/v1/plugins/settings-only/nodes/n-1/proposals"), 404)


class _SetupActions(_SettingsOnly):
    """Durable setup actions: ``register`` (management only) and ``signing`` (needs
    approval access); intents kept by operation id, changed intent refused."""

    form: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"host": {"type": "string"}}}

    def __init__(self) -> None:
        self.operations: dict[str, tuple[SetupStart, SetupOperation]] = {}

    async def configuration_nodes(self) -> list[ConfigurableNode]:
        node = ConfigurableNode(
            node_id="s-1", bundle_id="b", version="1", status="ready", setup_actions_available=True
        )
        return [node]

    async def node_setup_actions(self, node_id: str) -> NodeSetupActions:
        return NodeSetupActions(
            node_id=node_id,
            revision=1,
            schema_digest="a" * 64,
            credential_revision=0,
            credential_schema_digest="b" * 64,
            actions=(
                SetupAction(
                    action_id="register",
                    title="Register",
                    parameters_schema=self.form,
                    schema_digest="c" * 64,
                ),
                SetupAction(
                    action_id="signing",
                    title="Prepare signing",
                    parameters_schema={"type": "object"},
                    schema_digest="d" * 64,
                    requires_approval=True,
                ),
            ),
            operations=tuple(op for _, op in self.operations.values()),
        )

    async def start_node_setup(self, node_id: str, start: SetupStart) -> SetupOperation:
        retained = self.operations.get(start.operation_id)
        if retained is not None:
            if retained[0] != start:
                raise NodeConfigurationRefused("that operation id was used for another intent")
            return retained[1]
        operation = SetupOperation(
            operation_id=start.operation_id,
            node_id=node_id,
            action_id=start.action_id,
            requires_approval=start.expected_requires_approval,
            phase="queued",
        )
        self.operations[start.operation_id] = (start, operation)
        return operation

    async def node_setup_operation(self, node_id: str, operation_id: str) -> SetupOperation:
        if operation_id not in self.operations:
            raise UnknownNode(operation_id)
        return self.operations[operation_id][1]

    async def resume_node_setup(self, node_id: str, operation_id: str) -> SetupOperation:
        start, operation = self.operations[operation_id]
        resumed = msgspec.structs.replace(operation, phase="running")
        self.operations[operation_id] = (start, resumed)
        return resumed


def test_setup_actions_fenced_deduplicated_and_approval_scoped(
    app: AppNode, manager: Manager
) -> None:
    provider = _SetupActions()
    assert NodeConfigurations.for_node(app.node).add_in_process("with-actions", provider)
    base = "/v1/plugins/with-actions/nodes/s-1"
    listing = ok(owner(app, "GET", f"{base}/setup-actions"))
    assert [(a["actionId"], a["requiresApproval"]) for a in listing["actions"]] == [
        ("register", False),
        ("signing", True),
    ]
    start = {
        "operationId": "1" * 32,
        "actionId": "register",
        "values": {"host": "a"},
        "expectedRevision": 1,
        "expectedSchemaDigest": "a" * 64,
        "expectedCredentialRevision": 0,
        "expectedCredentialSchemaDigest": "b" * 64,
        "expectedActionSchemaDigest": "c" * 64,
    }
    path = f"{base}/setup-operations"
    assert ok(owner(app, "POST", path, json=start))["phase"] == "queued"
    assert ok(owner(app, "POST", path, json=start))["operationId"] == "1" * 32  # retained
    changed = {**start, "values": {"host": "b"}}
    refused(owner(app, "POST", path, json=changed), 409, "another intent")
    fresh = {**start, "operationId": "2" * 32}
    refused(owner(app, "POST", path, json={**fresh, "expectedRevision": 0}), 409, "changed")
    refused(owner(app, "POST", path, json={**fresh, "expectedRequiresApproval": True}), 409)
    refused(owner(app, "POST", path, json={**fresh, "actionId": "nothing"}), 404)
    refused(owner(app, "POST", path, json={**fresh, "values": {"host": "x" * 17000}}), 422)
    refused(owner(app, "POST", path, json={**fresh, "operationId": "NOPE"}), 422)
    assert len(provider.operations) == 1
    operation = f"{path}/{'1' * 32}"
    assert ok(owner(app, "GET", operation))["phase"] == "queued"
    refused(owner(app, "GET", f"{path}/{'9' * 32}"), 404)
    refused(owner(app, "GET", f"{path}/not-hex"), 422)
    refused(owner(app, "POST", f"{operation}/resume", json={"values": {}}), 422)
    assert ok(owner(app, "POST", f"{operation}/resume"))["phase"] == "running"

    # Approval access: a paired device with plugins:manage only may start the
    # management-only action, not the one requiring approval (403 before any effect).
    service = OperatorPairingService.open(app.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device(name="Setup phone"))
    set_scopes(app.data_dir, device.device_id, ["plugins:read", "plugins:manage"])
    bearer = {**OWNER, **device.bearer}
    signing = {
        **start,
        "operationId": "3" * 32,
        "actionId": "signing",
        "values": {},
        "expectedActionSchemaDigest": "d" * 64,
        "expectedRequiresApproval": True,
    }
    denied = app.post(path, json=signing, headers=bearer)
    assert denied.status_code == 403 and "plugins:approve" in denied.json()["error"]["message"]
    assert "3" * 32 not in provider.operations
    managed = app.post(path, json={**start, "operationId": "4" * 32}, headers=bearer)
    assert managed.status_code == 200, managed.text
    assert ok(owner(app, "POST", path, json=signing))["requiresApproval"] is True  # direct owner
    resume = app.post(f"{path}/{'3' * 32}/resume", headers=bearer)
    assert resume.status_code == 403  # the retained operation requires approval access

    _SetupActions.form = {"type": "object", "properties": {"pw": {"writeOnly": True}}}
    refused(owner(app, "GET", f"{base}/setup-actions"), 409, "secret")
    refused(owner(app, "GET", f"{NODE}/setup-actions"), 404)  # the managed owner has none


def test_authority_and_no_store_on_refusals(app: AppNode, manager: Manager) -> None:
    bare = app.get(f"{NODE}/configuration")
    assert bare.status_code == 403 and bare.headers["cache-control"].startswith("no-store")
    assert "plugins are managed from a browser on this node" in bare.json()["error"]["message"]
    service = OperatorPairingService.open(app.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device())
    bearer = {**OWNER, **device.bearer}
    none = app.get(f"{NODE}/configuration", headers=bearer)
    assert none.status_code == 403 and none.headers["cache-control"].startswith("no-store")
    set_scopes(app.data_dir, device.device_id, ["plugins:read"])
    assert app.get(f"{NODE}/configuration", headers=bearer).status_code == 200
    assert app.get(f"{NODE}/credentials", headers=bearer).status_code == 200
    body = {"operation": "disable", "expectedRevision": 0, "expectedSchemaDigest": "0" * 64}
    write = app.post(f"{NODE}/configuration", json=body, headers=bearer)
    assert write.status_code == 403 and "plugins:manage" in write.json()["error"]["message"]
    assert write.headers["cache-control"].startswith("no-store")


class _Blocking(_SettingsOnly):
    schema: ClassVar[dict[str, Any]] = {"type": "object"}  # not the one a test replaced

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def node_configuration(self, node_id: str) -> NodeConfiguration:
        await self.release.wait()
        return await super().node_configuration(node_id)


def test_dispatch_is_bounded_and_has_a_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> tuple[list[str], str]:
        door = NodeConfigurations()
        provider = _Blocking()
        door.add_in_process("blocking", provider)
        pending = [
            asyncio.create_task(door.configuration("blocking", "n-1"))
            for _ in range(MAX_IN_FLIGHT + 1)
        ]
        await asyncio.sleep(0.2)
        provider.release.set()
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
        kinds = [o.kind if isinstance(o, ConfigurationFailure) else "ok" for o in outcomes]
        monkeypatch.setattr(configuration, "DEADLINE_SECONDS", 0.2)
        provider.release.clear()
        try:
            await door.configuration("blocking", "n-1")
        except ConfigurationFailure as failure:
            return kinds, failure.kind
        return kinds, "answered"

    kinds, late = asyncio.run(scenario())
    # Each read is two dispatches (inventory, then settings): beyond eight at once, the
    # rest are refused at once (429), never queued; a slow provider meets the deadline.
    assert "busy" in kinds and "ok" in kinds
    assert late == "timeout"
