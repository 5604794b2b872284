"""The CLI's operational jobs against the real app, in process: `skulk diagnostics
cancel|telemetry|envelopes`, `skulk connectivity`, and `skulk plugins proposals|setup|
grants`, each in its table and ``--json`` forms.

The CLI's own client is used unchanged; only its HTTP connection is the in-process
app's transport (no daemon to start). The plugin facets are served by in-process
providers registered as the extension host registers one: the ``proposal_desk``
fixture provider, and a setup-actions provider whose operations finish at once.
The store's jobs run against a real store host in ``test_store_cli.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner, Result

from skulk.extensions import ConfigurableNode, NodeConfigurationRefused
from skulk_cli.main import app as cli_app
from skulk_cli.node_http import NodeHttp
from skulk_cli.render import placement_progress
from skulk_cli.views import ClusterState, InstanceBody, parse
from skulk_core.extensions.setup_actions import (
    NodeSetupActions,
    SetupAction,
    SetupOperation,
    SetupStart,
)
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.plugins.configuration import NodeConfigurations
from tests.api.in_process import AppNode
from tests.daemon.pairing import Device, pair_in_process
from tests.plugins.proposal_desk import DIGESTS, TERMS, ProposalDesk

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TERMINAL = {"COLUMNS": "200", "LINES": "60"}
runner = CliRunner()


class Installer:
    """Setup actions: ``install`` runs at once; ``broken`` always fails."""

    plugin_id = "installer"
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"host": {"type": "string"}},
    }

    def __init__(self) -> None:
        self.started: list[SetupStart] = []

    async def configuration_nodes(self) -> list[ConfigurableNode]:
        return [
            ConfigurableNode(
                node_id="inst-1",
                bundle_id="installer",
                version="1",
                status="ready",
                configurable=False,
                setup_actions_available=True,
            )
        ]

    async def node_configuration(self, node_id: str) -> Any:
        raise NodeConfigurationRefused("no ordinary settings")

    async def configure_node(self, node_id: str, mutation: Any) -> Any:
        raise NodeConfigurationRefused("no ordinary settings")

    async def node_setup_actions(self, node_id: str) -> NodeSetupActions:
        actions = tuple(
            SetupAction(
                action_id=action,
                title=action.title(),
                parameters_schema=self.schema,
                schema_digest=digest * 64,
                description=f"The {action} step.",
            )
            for action, digest in (("install", "c"), ("broken", "d"))
        )
        return NodeSetupActions(
            node_id=node_id,
            revision=3,
            schema_digest="a" * 64,
            credential_revision=1,
            credential_schema_digest="b" * 64,
            actions=actions,
            operations=tuple(self._operation(start) for start in self.started),
        )

    def _operation(self, start: SetupStart) -> SetupOperation:
        failed = start.action_id == "broken"
        return SetupOperation(
            operation_id=start.operation_id,
            node_id="inst-1",
            action_id=start.action_id,
            requires_approval=False,
            phase="failed" if failed else "complete",
            code="host_unreachable" if failed else None,
            corrective_action="Check the host name." if failed else None,
        )

    async def start_node_setup(self, node_id: str, start: SetupStart) -> SetupOperation:
        self.started.append(start)
        # The first answer is queued; a read finds it settled.
        return SetupOperation(
            operation_id=start.operation_id,
            node_id=node_id,
            action_id=start.action_id,
            requires_approval=False,
            phase="queued",
        )

    async def node_setup_operation(self, node_id: str, operation_id: str) -> SetupOperation:
        start = next(s for s in self.started if s.operation_id == operation_id)
        return self._operation(start)

    async def resume_node_setup(self, node_id: str, operation_id: str) -> SetupOperation:
        return await self.node_setup_operation(node_id, operation_id)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppNode]:
    root = tmp_path_factory.mktemp("ops-cli")
    with AppNode(root=root / "node", models_dir=root / "models") as node:
        configurations = NodeConfigurations.for_node(node.node)
        assert configurations.add_in_process("desk", ProposalDesk())
        assert configurations.add_in_process("installer", Installer())
        yield node


@pytest.fixture(autouse=True)
def through_the_app(app: AppNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's client, unchanged, over the in-process app's transport."""
    made = NodeHttp.__init__

    def in_process(self: NodeHttp, base_url: str, *args: Any, **kwargs: Any) -> None:
        made(self, base_url, *args, **kwargs)
        self._http.close()
        self._http = app.new_http()

    monkeypatch.setattr(NodeHttp, "__init__", in_process)


def skulk(app: AppNode, *args: str) -> Result:
    return runner.invoke(cli_app, ["--api-url", app.url, *args], env=TERMINAL, prog_name="skulk")


def plain(text: str) -> str:
    return " ".join(ANSI.sub("", text).split())


def test_diagnostics_jobs_and_connectivity(app: AppNode) -> None:
    node_id = str(app.node.node_id)
    unknown = skulk(app, "diagnostics", "cancel", "no-such-runner")
    assert unknown.exit_code == 1
    assert "has no runner 'no-such-runner'" in plain(unknown.output)

    transport = skulk(app, "diagnostics", "telemetry", "--json")
    assert transport.exit_code == 0, transport.output
    assert json.loads(transport.stdout)["nodeId"] == node_id
    shown = skulk(app, "diagnostics", "telemetry")
    assert shown.exit_code == 0, shown.output
    fabric = json.loads(transport.stdout)["fabric"]
    expected = "Telemetry transport of" if fabric else "runs no fabric"
    assert expected in plain(shown.stdout)
    preview = skulk(app, "diagnostics", "telemetry", "--preview")
    assert preview.exit_code == 0, preview.output
    assert "Field telemetry" in plain(preview.stdout) and "consent" in plain(preview.stdout)
    raw_preview = json.loads(skulk(app, "diagnostics", "telemetry", "--preview", "--json").stdout)
    assert {"enabled", "consent", "pending"} <= set(raw_preview)

    envelopes = skulk(app, "diagnostics", "envelopes", "--json")
    assert envelopes.exit_code == 0, envelopes.output
    assert json.loads(envelopes.stdout) == {"nodeId": node_id, "envelopes": []}
    assert "no measured requests" in plain(skulk(app, "diagnostics", "envelopes").stdout)
    cluster = skulk(app, "diagnostics", "envelopes", "--cluster", "--json")
    assert cluster.exit_code == 0, cluster.output
    assert [m["nodeId"] for m in json.loads(cluster.stdout)["nodes"]] == [node_id]

    reached = skulk(app, "connectivity", "--json")
    assert reached.exit_code == 0, reached.output
    answer = json.loads(reached.stdout)
    assert {"local", "tailscale", "preferredUrl"} <= set(answer["remoteAccess"])
    assert isinstance(answer["tailscale"]["running"], bool)
    table = plain(skulk(app, "connectivity").stdout)
    assert "Connectivity of this node" in table and "Tailscale" in table
    elsewhere = skulk(app, "connectivity", "--node", "12D3KooWnotamember")
    assert elsewhere.exit_code == 1


def test_proposals_review_approve_and_observe(app: AppNode) -> None:
    listed = skulk(app, "plugins", "proposals", "list", "desk", "desk-1", "--json")
    assert listed.exit_code == 0, listed.output
    ids = [p["reference"]["proposalId"] for p in json.loads(listed.stdout)["proposals"]]
    assert ids == list(DIGESTS)
    table = plain(skulk(app, "plugins", "proposals", "list", "desk", "desk-1").stdout)
    assert "rent-1" in table and DIGESTS["rent-1"] in table

    review = skulk(
        app, "plugins", "proposals", "show", "desk", "desk-1", "rent-1", "--digest", "a" * 64
    )
    assert review.exit_code == 0, review.output
    assert f"--review-revision {TERMS['rent-1']}" in plain(review.output)
    wrong = skulk(
        app, "plugins", "proposals", "show", "desk", "desk-1", "rent-1", "--digest", "f" * 64
    )
    assert wrong.exit_code == 1

    stale = skulk(
        app, "plugins", "proposals", "approve", "desk", "desk-1", "rent-1",
        "--digest", "a" * 64, "--review-revision", "9" * 64,
    )  # fmt: skip
    assert stale.exit_code == 1 and "changed" in plain(stale.output)
    approved = skulk(
        app, "plugins", "proposals", "approve", "desk", "desk-1", "rent-1",
        "--digest", "a" * 64, "--review-revision", str(TERMS["rent-1"]), "--json",
    )  # fmt: skip
    assert approved.exit_code == 0, approved.output
    operation = json.loads(approved.stdout)
    assert operation["phase"] == "acknowledged"
    observed = skulk(
        app, "plugins", "proposals", "status", "desk", "desk-1", operation["operationId"]
    )
    assert observed.exit_code == 0, observed.output
    assert "acknowledged" in plain(observed.stdout)


def test_setup_actions_run_and_fail_visibly(app: AppNode) -> None:
    listed = skulk(app, "plugins", "setup", "actions", "installer", "inst-1")
    assert listed.exit_code == 0, listed.output
    assert "install" in plain(listed.stdout) and "The broken step." in plain(listed.stdout)

    ran = skulk(
        app, "plugins", "setup", "run", "installer", "inst-1", "install",
        "--values", '{"host": "example.internal"}', "--json",
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    done = json.loads(ran.stdout)
    assert (done["actionId"], done["phase"]) == ("install", "complete")
    status = skulk(
        app, "plugins", "setup", "status", "installer", "inst-1", done["operationId"], "--json"
    )
    assert json.loads(status.stdout)["phase"] == "complete"

    failed = skulk(app, "plugins", "setup", "run", "installer", "inst-1", "broken")
    assert failed.exit_code == 1
    assert "host_unreachable" in plain(failed.stdout)
    missing = skulk(app, "plugins", "setup", "run", "installer", "inst-1", "nope")
    assert missing.exit_code == 1 and "no setup action 'nope'" in plain(missing.output)
    bad = skulk(app, "plugins", "setup", "run", "installer", "inst-1", "install", "--values", "[")
    assert bad.exit_code == 2


def test_grants_list_and_set(app: AppNode) -> None:
    service = OperatorPairingService.open(app.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device(name="Ops phone"))

    listed = skulk(app, "plugins", "grants", "list", "--json")
    assert listed.exit_code == 0, listed.output
    row = next(d for d in json.loads(listed.stdout)["devices"] if d["deviceId"] == device.device_id)
    assert (row["scopes"], row["revision"]) == ([], 0)
    assert "Ops phone" in plain(skulk(app, "plugins", "grants", "list").stdout)

    granted = skulk(app, "plugins", "grants", "set", device.device_id, "--scope", "plugins:read")
    assert granted.exit_code == 0, granted.output
    assert "Ops phone now has plugins:read" in plain(granted.stdout)
    stale = skulk(app, "plugins", "grants", "set", device.device_id, "--revision", "0", "--json")
    assert stale.exit_code == 1
    after = json.loads(skulk(app, "plugins", "grants", "list", "--json").stdout)["devices"]
    assert next(d for d in after if d["deviceId"] == device.device_id)["scopes"] == ["plugins:read"]


def test_place_progress_names_the_nodes_or_the_stores_transfer() -> None:
    body = parse(
        {"instanceId": "i-1", "shardAssignments": {"modelId": "org/m", "nodeToRunner": {"b": "r"}}},
        InstanceBody,
        "instance",
    )

    def line(downloads: dict[str, Any]) -> str:
        state = parse(
            {
                "runners": {"r": {"RunnerLoading": {}}},
                "downloads": downloads,
                "storeHosts": {"a": {"port": 12415}},
            },
            ClusterState,
            "state",
        )
        return placement_progress("org/m", "i-1", body, state).plain

    def report(done: int) -> list[dict[str, Any]]:
        return [
            {
                "modelId": "org/m",
                "status": "in_progress",
                "downloadedBytes": done,
                "totalBytes": 4096,
            }
        ]

    assert "store downloading 1.0 KiB / 4.0 KiB" in line({"a": report(1024)})
    assert "(downloading 2.0 KiB / 4.0 KiB)" in line({"a": report(1024), "b": report(2048)})
    assert "downloading" not in line({})
