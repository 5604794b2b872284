"""The distinct owner proposal actions through the real in-process app: the
``proposal_desk`` provider (written only against ``skulk.extensions``) registered as the
extension host registers one, and the same provider served by a real owner runtime
process on its owner-only socket, reached through the managed-owner adapter
(``proposal-approve`` / ``proposal-operation`` / ``proposal-resume``).

Proves: approval of the exact reviewed terms (a stale or null review fence is refused
before the provider acts), an identical accepted request observes the retained work
(no second effect), a reused id with changed intent is refused, route and reference
must match, caller-supplied actors are rejected (422), 32-lowercase-hex ids, resume
only of an interrupted approval (acknowledged work is observed, never replayed),
``plugins:approve`` for both POST routes (``plugins:manage`` cannot approve,
``plugins:read`` observes), the authenticated operator recorded, ``Cache-Control:
no-store`` on every answer."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.plugins.configuration import NodeConfigurations
from skulk_daemon.plugins.owners.adapter import ManagedOwner
from skulk_host.plugin_owners import wire
from tests.api.in_process import AppNode
from tests.daemon.pairing import Device, pair_in_process, set_scopes
from tests.plugins.proposal_desk import DIGESTS, TERMS, ProposalDesk

OWNER = {"X-Skulk-Dashboard": "pairing-v1"}
REPO = Path(__file__).resolve().parents[2]
BASE = "/v1/plugins/desk/nodes/desk-1"
MANAGED = "/v1/plugins/managed.desk/nodes/desk-1"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppNode]:
    root = tmp_path_factory.mktemp("proposal-app")
    with AppNode(root=root / "node", models_dir=root / "models") as node:
        yield node


@pytest.fixture(scope="module")
def desk(app: AppNode) -> ProposalDesk:
    provider = ProposalDesk()
    assert NodeConfigurations.for_node(app.node).add_in_process("desk", provider)
    return provider


def call(app: AppNode, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {**OWNER, **kwargs.pop("headers", {})}
    response = app.http.request(method, path, headers=headers, **kwargs)
    assert response.headers["cache-control"].startswith("no-store"), (path, response.headers)
    return response


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def refused(response: httpx.Response, status: int, fragment: str = "") -> None:
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]["message"], response.text


def approval(proposal: str, operation_id: str, plugin: str = "desk") -> dict[str, Any]:
    reference = {
        "pluginId": plugin,
        "nodeId": "desk-1",
        "proposalId": proposal,
        "proposalDigest": DIGESTS[proposal],
    }
    return {"operationId": operation_id, "reference": reference, "reviewRevision": TERMS[proposal]}


def test_approval_is_exact_retained_and_never_replayed(app: AppNode, desk: ProposalDesk) -> None:
    review = ok(call(app, "GET", f"{BASE}/proposals/rent-1", params={"proposal_digest": "a" * 64}))
    assert review["approvalRevision"] == TERMS["rent-1"]
    body = approval("rent-1", "1" * 32)
    first = ok(call(app, "POST", f"{BASE}/proposals/rent-1/approve", json=body))
    assert (first["operationId"], first["phase"]) == ("1" * 32, "acknowledged")
    assert first["reference"] == body["reference"]
    assert first["reconciliation"] == {
        "state": "pending",
        "observedAt": None,
        "stale": True,
        "code": None,
    }
    assert (desk.effects, desk.operators) == (1, ["owner"])
    # The identical request observes the retained work: no second effect.
    again = ok(call(app, "POST", f"{BASE}/proposals/rent-1/approve", json=body))
    assert again == first and desk.effects == 1
    # The same id for another proposal: changed intent.
    other = approval("flaky-1", "1" * 32)
    refused(call(app, "POST", f"{BASE}/proposals/flaky-1/approve", json=other), 409, "another")
    # A fresh id with a stale fence, or where approval is unavailable: refused before the
    # provider acts.
    stale = {**approval("rent-1", "2" * 32), "reviewRevision": "9" * 64}
    refused(call(app, "POST", f"{BASE}/proposals/rent-1/approve", json=stale), 409, "changed")
    closed = {**approval("rent-1", "3" * 32), "reviewRevision": "0" * 64}
    closed["reference"] = {
        **closed["reference"],
        "proposalId": "closed-1",
        "proposalDigest": "c" * 64,
    }
    refused(
        call(app, "POST", f"{BASE}/proposals/closed-1/approve", json=closed), 409, "no approval"
    )
    assert desk.effects == 1
    # Route and reference must match; malformed ids and caller-chosen actors are 422.
    refused(call(app, "POST", f"{BASE}/proposals/flaky-1/approve", json=stale), 409, "route")
    for bad in (
        {**body, "operationId": "1" * 31 + "G"},
        {**body, "operatorId": "someone-else"},
        {**body, "approvalProof": "sig"},
        {**body, "reviewRevision": "short"},
    ):
        refused(call(app, "POST", f"{BASE}/proposals/rent-1/approve", json=bad), 422)
    refused(call(app, "POST", f"{BASE}/proposals/bad%20id/approve", json=body), 422)
    assert desk.effects == 1

    # Observation: the retained action, never an effect.
    seen = ok(call(app, "GET", f"{BASE}/proposal-operations/{'1' * 32}"))
    assert seen == first and desk.effects == 1
    refused(call(app, "GET", f"{BASE}/proposal-operations/{'9' * 32}"), 404)
    refused(call(app, "GET", f"{BASE}/proposal-operations/NOT-HEX"), 422)
    # Acknowledged work cannot be resumed: observed only.
    resume = f"{BASE}/proposal-operations/{'1' * 32}/resume"
    refused(call(app, "POST", resume), 409, "acknowledged")
    assert desk.effects == 1


def test_only_an_interrupted_approval_resumes(app: AppNode, desk: ProposalDesk) -> None:
    body = approval("flaky-1", "4" * 32)
    interrupted = ok(call(app, "POST", f"{BASE}/proposals/flaky-1/approve", json=body))
    assert (interrupted["phase"], interrupted["code"]) == ("approval_interrupted", "signer_offline")
    before = desk.effects
    resume = f"{BASE}/proposal-operations/{'4' * 32}/resume"
    refused(call(app, "POST", resume, json={"reviewRevision": "2" * 64}), 422, "no body")
    finished = ok(call(app, "POST", resume, json={}))
    assert (finished["phase"], finished["reference"]) == ("succeeded", body["reference"])
    assert desk.effects == before + 1
    refused(call(app, "POST", resume), 409, "succeeded")  # never run twice
    refused(call(app, "POST", f"{BASE}/proposal-operations/{'8' * 32}/resume"), 404)
    assert desk.effects == before + 1
    # A node without the facet: 404 (the provider is found, the facet is not).
    refused(
        call(app, "GET", f"/v1/plugins/nothing/nodes/desk-1/proposal-operations/{'1' * 32}"), 404
    )


def test_approval_needs_the_explicit_grant(app: AppNode, desk: ProposalDesk) -> None:
    bare = app.post(f"{BASE}/proposals/rent-1/approve", json=approval("rent-1", "5" * 32))
    assert bare.status_code == 403 and bare.headers["cache-control"].startswith("no-store")
    service = OperatorPairingService.open(app.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device(name="Approver"))
    set_scopes(app.data_dir, device.device_id, ["plugins:read", "plugins:manage"])
    bearer = device.bearer
    before = desk.effects
    for path, body in (
        (f"{BASE}/proposals/rent-1/approve", approval("rent-1", "5" * 32)),
        (f"{BASE}/proposal-operations/{'4' * 32}/resume", None),
    ):
        denied = call(app, "POST", path, json=body, headers=bearer)
        refused(denied, 403, "plugins:approve")
    assert desk.effects == before
    ok(call(app, "GET", f"{BASE}/proposal-operations/{'1' * 32}", headers=bearer))  # read
    set_scopes(app.data_dir, device.device_id, ["plugins:approve"])
    granted = ok(
        call(
            app,
            "POST",
            f"{BASE}/proposals/rent-1/approve",
            json=approval("rent-1", "5" * 32),
            headers=bearer,
        )
    )
    assert granted["phase"] == "acknowledged"
    assert desk.operators[-1] == f"device:{device.device_id}"


@pytest.fixture(scope="module")
def managed(app: AppNode) -> Iterator[subprocess.Popen[bytes]]:
    """The same provider in a real owner runtime process, attached to the app's adapter
    as the manager's inventory would attach it."""
    # NOTE: a short root: a Unix socket path is at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="desk-", dir="/tmp"))
    installation = root / "managed.desk"
    command = [
        sys.executable,
        "-m",
        "skulk_host.plugin_owners.owner_host",
        "--entry",
        "tests.plugins.proposal_desk:ManagedDesk",
        "--control",
        str(wire.owner_dir(installation)),
    ]
    log = (root / "owner.log").open("wb")
    process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log, env=dict(os.environ))
    door = NodeConfigurations.for_node(app.node)
    owners = door.owners
    assert owners is not None
    owner = ManagedOwner("managed.desk", installation)
    deadline = time.monotonic() + 30
    while not wire.socket_path(installation).exists():
        assert process.poll() is None and time.monotonic() < deadline, (
            root / "owner.log"
        ).read_text()
        time.sleep(0.1)
    owners._owners["managed.desk"] = owner
    asyncio.run(owners._observe(owner))
    assert owner.described and "proposal_actions" in owner.facets
    yield process
    process.terminate()
    process.wait(10)
    log.close()
    owners._owners.pop("managed.desk", None)
    shutil.rmtree(root, ignore_errors=True)


def test_managed_owner_serves_the_actions_over_its_socket(
    app: AppNode, managed: subprocess.Popen[bytes]
) -> None:
    body = approval("rent-1", "6" * 32, plugin="managed.desk")
    first = ok(call(app, "POST", f"{MANAGED}/proposals/rent-1/approve", json=body))
    assert (first["phase"], first["reference"]) == ("acknowledged", body["reference"])
    assert ok(call(app, "POST", f"{MANAGED}/proposals/rent-1/approve", json=body)) == first
    changed = approval("flaky-1", "6" * 32, plugin="managed.desk")
    refused(call(app, "POST", f"{MANAGED}/proposals/flaky-1/approve", json=changed), 409)
    stale = {**approval("rent-1", "7" * 32, plugin="managed.desk"), "reviewRevision": "9" * 64}
    refused(call(app, "POST", f"{MANAGED}/proposals/rent-1/approve", json=stale), 409, "changed")
    assert ok(call(app, "GET", f"{MANAGED}/proposal-operations/{'6' * 32}")) == first
    refused(call(app, "GET", f"{MANAGED}/proposal-operations/{'7' * 32}"), 404)
    refused(call(app, "POST", f"{MANAGED}/proposal-operations/{'6' * 32}/resume"), 409)
    interrupted = approval("flaky-1", "a" * 32, plugin="managed.desk")
    phase = ok(call(app, "POST", f"{MANAGED}/proposals/flaky-1/approve", json=interrupted))["phase"]
    assert phase == "approval_interrupted"
    resumed = ok(call(app, "POST", f"{MANAGED}/proposal-operations/{'a' * 32}/resume"))
    assert resumed["phase"] == "succeeded"
    assert managed.poll() is None


def test_answers_for_another_operation_or_node_are_refused(
    app: AppNode, desk: ProposalDesk
) -> None:
    body = approval("rent-1", "b" * 32)
    retained = ok(call(app, "POST", f"{BASE}/proposals/rent-1/approve", json=body))
    approved, operation = desk.journal["b" * 32]
    try:
        desk.journal["b" * 32] = (
            approved,
            msgspec.structs.replace(operation, operation_id="c" * 32),
        )
        path = f"{BASE}/proposal-operations/{'b' * 32}"
        refused(call(app, "GET", path), 409, "another operation")
        elsewhere = msgspec.structs.replace(operation.reference, node_id="desk-2")
        desk.journal["b" * 32] = (approved, msgspec.structs.replace(operation, reference=elsewhere))
        refused(call(app, "GET", path), 409, "another node")
    finally:
        desk.journal["b" * 32] = (approved, operation)
    assert ok(call(app, "GET", f"{BASE}/proposal-operations/{'b' * 32}")) == retained
