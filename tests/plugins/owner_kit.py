"""A managed owner for the adapter tests: the ``settings-echo`` fixture (written only
against ``skulk.extensions``) packaged as a real signed release, installed and
activated through a real manager, so the owner runtime serves it on its socket.

The wheel adds one module beside the fixture, ``skulk_settings_echo.managed``: the same
provider plus ``settings.hang@1.0.0``, a capability that never answers (the deadline
test), the preflight facet of ``skulk.extensions.setup`` and one retained proposal
(``skulk.extensions.proposals``); it declares
``owner = skulk_settings_echo.managed:ManagedSettingsEcho`` under
``skulk.capability_runtime``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.plugins.kit import Feed, Publisher, Wheel, build_wheel, release_document, trust_document
from tests.plugins.manager_process import Manager

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "settings-echo" / "skulk_settings_echo"
DIST = "skulk_settings_echo"
MANAGED = '''"""settings-echo as a managed owner, plus a capability that never answers."""

import asyncio
import hashlib
import json
import time

from skulk.extensions import (
    CapabilityDescriptor,
    ConfigurableNode,
    NodeConfigurationRefused,
    schema_digest,
)
from skulk.extensions.proposals import (
    ProposalField,
    ProposalPage,
    ProposalReference,
    ProposalReview,
    ProposalSummary,
)
from skulk.extensions.setup import NodePreflight, PreflightCheck

from skulk_settings_echo import ECHO, SCHEMA, SettingsEchoExtension

HANG = CapabilityDescriptor(
    id="settings.hang",
    version="1.0.0",
    title="Never answers",
    description="Sleeps past any deadline.",
    input_schema={"type": "object"},
    output_schema={"type": "object"},
)


RETAINED = ProposalSummary(
    reference=ProposalReference(
        plugin_id="managed.echo", node_id="echo-1", proposal_id="p-1", proposal_digest="d" * 64
    ),
    summary="Rent one echo box for an hour",
    expires_at=int(time.time()) + 3600,
    state="pending",
)


class ManagedSettingsEcho(SettingsEchoExtension):
    async def configuration_nodes(self):
        node = (await super().configuration_nodes())[0]
        return [
            ConfigurableNode(
                node_id=node.node_id,
                bundle_id=node.bundle_id,
                version=node.version,
                status=node.status,
                credentials_configurable=True,
                proposals_available=True,
            )
        ]

    async def node_proposals(self, node_id, offset):
        self._check(node_id)
        return ProposalPage(proposals=(RETAINED,) if offset == 0 else ())

    async def node_proposal(self, reference):
        if reference != RETAINED.reference:
            raise NodeConfigurationRefused("no retained proposal matches that reference")
        fields = (ProposalField(label="Price", value="0 credits"),)
        return ProposalReview(proposal=RETAINED, observed_at=int(time.time()), fields=fields)

    def capabilities(self):
        return [ECHO, HANG]

    async def handle_call(self, context, call):
        if call.capability_id == "settings.hang":
            await asyncio.sleep(3600)
        return await super().handle_call(context, call)

    async def node_preflight(self, node_id):
        self._check(node_id)
        values = json.dumps(self.values, sort_keys=True).encode()
        key_ready = bool(self.key_digests) and not self.retired
        return NodePreflight(
            node_id=node_id,
            revision=self.revision,
            schema_digest=schema_digest(SCHEMA),
            values_digest=hashlib.sha256(values).hexdigest(),
            credential_revision=self.credential_revision,
            observed_at=int(time.time()),
            checks=(
                PreflightCheck(code="prefix_set", passed=bool(self.values["prefix"])),
                PreflightCheck(
                    code="api_key_ready",
                    passed=key_ready,
                    corrective_action=None if key_ready else "Replace the api_key credential.",
                ),
            ),
        )
'''


def fixture_owner_wheel(
    out_dir: Path, *, dist: str, modules: dict[str, bytes], owner: str
) -> Wheel:
    """A real wheel of ``dist`` holding ``modules`` (relative path to source) that
    declares ``owner`` (``module:attr``) under ``skulk.capability_runtime``."""
    entry_points = f"[skulk.capability_runtime]\nowner = {owner}\n".encode()
    return build_wheel(
        out_dir,
        dist=dist,
        owner=False,
        extra_members={**modules, f"{dist}-1.0.0.dist-info/entry_points.txt": entry_points},
    )


def publish_fixture_owner(
    feed: Feed,
    publisher: Publisher,
    out_dir: Path,
    *,
    dist: str,
    source: Path,
    owner_class: str,
    bundle_id: str,
) -> None:
    """A fixture package (one ``__init__.py``) signed by ``publisher`` and served from
    ``feed`` as ``release.json`` with its wheel."""
    wheel = fixture_owner_wheel(
        out_dir,
        dist=dist,
        modules={f"{dist}/__init__.py": source.read_bytes()},
        owner=f"{dist}:{owner_class}",
    )
    _publish(feed, publisher, wheel, bundle_id)


def owner_wheel(out_dir: Path) -> Wheel:
    return fixture_owner_wheel(
        out_dir,
        dist=DIST,
        modules={
            f"{DIST}/__init__.py": (FIXTURE / "__init__.py").read_bytes(),
            f"{DIST}/managed.py": MANAGED.encode(),
        },
        owner=f"{DIST}.managed:ManagedSettingsEcho",
    )


def publish_owner(feed: Feed, publisher: Publisher, out_dir: Path) -> None:
    _publish(feed, publisher, owner_wheel(out_dir), "skulk-settings-echo")


def _publish(feed: Feed, publisher: Publisher, wheel: Wheel, bundle_id: str) -> None:
    document = release_document(publisher, [wheel], bundle_id=bundle_id)
    feed.publish("release.json", publisher.sign(document))
    feed.publish_wheel(wheel)


def ok(answer: dict[str, Any]) -> Any:
    assert answer["ok"], answer
    return answer["result"]


def settle(read: Any, done: Any, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        current = read()
        if done(current):
            return current
        assert time.monotonic() < deadline, current
        time.sleep(0.2)


def install_owner(
    manager: Manager, feed: Feed, publisher: Publisher, plugin_id: str, token: str
) -> str:
    """Register, configure the source, stage and activate; the runtime digest."""
    ok(manager(action="register", plugin_id=plugin_id))
    source = {
        "expected_revision": 0,
        "base_url": feed.base_url,
        "trust": trust_document(publisher),
        "token": token,
    }
    ok(manager(action="configure_source", plugin_id=plugin_id, request=source))
    digest = str(ok(manager(action="inspect_release", plugin_id=plugin_id))["runtime_digest"])
    install = {"operation_id": f"{1:032x}", "runtime_digest": digest, "expected_source_revision": 1}
    ok(manager(action="install", plugin_id=plugin_id, request=install))
    staged = settle(
        lambda: ok(manager(action="install_status", plugin_id=plugin_id))["operation"],
        lambda op: op["state"] in ("staged", "recovery_required"),
    )
    assert staged["state"] == "staged", staged
    change(manager, plugin_id, 2, "activate", runtime_digest=digest, accept_permissions=True)
    return digest


def change(manager: Manager, plugin_id: str, n: int, action: str, **fields: Any) -> None:
    """Submit one lifecycle operation under the current revision and wait for it."""
    revision = ok(manager(action="get", plugin_id=plugin_id))["selection_revision"]
    request = {
        "operation_id": f"{n:032x}",
        "action": action,
        "expected_revision": revision,
        **fields,
    }
    ok(manager(action="submit", plugin_id=plugin_id, request=request))
    done = settle(
        lambda: ok(manager(action="operation", plugin_id=plugin_id, operation_id=f"{n:032x}")),
        lambda op: op["state"] in ("complete", "failed", "recovery_required"),
    )
    assert done["state"] == "complete", done
