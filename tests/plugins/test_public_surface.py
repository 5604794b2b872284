"""The public Python surface (``skulk.*``): a plugin written only against it installs as
an entry point, loads in a real daemon and answers a capability call; its settings and
credential facets keep their fences; and the surface re-exports the real objects."""

from __future__ import annotations

import ast
import asyncio
import importlib
import sys
import time
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

import skulk.extensions
import skulk.shared.types.capability_nodes
import skulk.shared.types.text_generation
import skulk_core.extensions.capability_nodes
import skulk_core.plugins.node_configuration
import skulk_daemon.extensions
from skulk.extensions import (
    NodeConfigurationMutation,
    NodeConfigurationProvider,
    NodeConfigurationRefused,
    NodeCredentialMutation,
    NodeCredentialsProvider,
    UnknownNode,
)
from skulk_daemon.extensions.loader import ENTRY_POINT_GROUP, load_extensions
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_package, site_env

PLUGIN = Path(__file__).resolve().parent / "fixtures" / "settings-echo"
SECRET = "sk-plugin-secret-value-0123456789"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    install_package(PLUGIN, site)
    return site


def test_the_plugin_imports_only_the_public_surface() -> None:
    source = PLUGIN / "skulk_settings_echo" / "__init__.py"
    imported: list[str] = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.append(node.module)
    ours = [name for name in imported if name.split(".")[0] not in sys.stdlib_module_names]
    assert ours, "the plugin imports nothing of Skulk"
    assert all(name == "skulk" or name.startswith("skulk.") for name in ours), ours


@pytest.mark.parametrize(
    ("surface", "real"),
    [
        (skulk.extensions, skulk_daemon.extensions),
        (skulk.extensions, skulk_core.plugins.node_configuration),
        (skulk.shared.types.capability_nodes, skulk_core.extensions.capability_nodes),
    ],
)
def test_the_surface_reexports_the_real_objects(surface: Any, real: Any) -> None:
    shared = [name for name in surface.__all__ if hasattr(real, name)]
    assert shared
    for name in shared:
        assert getattr(surface, name) is getattr(real, name), name


def test_text_generation_names_the_chat_request() -> None:
    types = skulk.shared.types.text_generation
    assert types.TextGenerationTaskParams is skulk_daemon.extensions.ChatTaskParams
    assert types.TextGenerationMessage is skulk_daemon.extensions.ChatMessage


@pytest.fixture
def loaded(site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(site))
    found = [
        ep
        for dist in distributions(path=[str(site)])
        for ep in dist.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]
    (extension,) = load_extensions(found)
    yield extension.obj
    sys.modules.pop("skulk_settings_echo", None)
    importlib.invalidate_caches()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_settings_facet_is_fenced_by_revision_and_schema(loaded: Any) -> None:
    assert isinstance(loaded, NodeConfigurationProvider)
    (node,) = run(loaded.configuration_nodes())
    assert (node.node_id, node.status, node.credentials_configurable) == (
        "echo-1",
        "disabled",
        True,
    )
    config = run(loaded.node_configuration("echo-1"))
    edit = NodeConfigurationMutation(
        operation="edit",
        expected_revision=config.revision,
        expected_schema_digest=config.schema_digest,
        values={"prefix": ">> "},
    )
    result = run(loaded.configure_node("echo-1", edit))
    assert result.validated and result.configuration.values == {"prefix": ">> "}
    assert result.configuration.revision == config.revision + 1
    # The same edit again carries a stale revision: refused, nothing changes.
    with pytest.raises(NodeConfigurationRefused, match="reload"):
        run(loaded.configure_node("echo-1", edit))
    stale_schema = msgspec.structs.replace(
        edit, expected_revision=result.configuration.revision, expected_schema_digest="0" * 64
    )
    with pytest.raises(NodeConfigurationRefused, match="schema"):
        run(loaded.configure_node("echo-1", stale_schema))
    with pytest.raises(UnknownNode):
        run(loaded.node_configuration("echo-2"))
    # The wire form is camelCase and a mutation without its values is malformed.
    wire = msgspec.json.decode(msgspec.json.encode(result.configuration))
    assert {"nodeId", "revision", "schemaDigest", "configurationSchema", "values"} <= set(wire)
    with pytest.raises(msgspec.ValidationError, match="values is required"):
        msgspec.json.decode(
            b'{"operation":"edit","expectedRevision":1,"expectedSchemaDigest":"'
            + b"0" * 64
            + b'"}',
            type=NodeConfigurationMutation,
        )


def test_the_credential_facet_is_write_only(loaded: Any) -> None:
    assert isinstance(loaded, NodeCredentialsProvider)
    before = run(loaded.node_credentials("echo-1"))
    mutation = NodeCredentialMutation(
        operation="replace",
        operation_id="a" * 32,
        credential_id="api_key",
        expected_revision=before.revision,
        expected_schema_digest=before.schema_digest,
        value=SECRET,
    )
    assert SECRET not in repr(mutation) and SECRET not in str(mutation)
    after = run(loaded.configure_node_credential("echo-1", mutation))
    assert after.credentials[0].ready and after.revision == before.revision + 1
    assert SECRET not in msgspec.json.encode(after).decode()
    # The exact operation again observes the retained result; changed intent is refused.
    again = run(loaded.configure_node_credential("echo-1", mutation))
    assert again.revision == after.revision
    changed = msgspec.structs.replace(mutation, value=SECRET + "x")
    with pytest.raises(NodeConfigurationRefused, match="another change"):
        run(loaded.configure_node_credential("echo-1", changed))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"operationId": "A" * 32, "value": "v"}, "regex"),
        ({"operationId": "a" * 31, "value": "v"}, "regex"),
        ({"value": ""}, "nonempty"),
        ({"value": "x" * 4097}, "4096"),
        ({"value": None}, "nonempty"),
        ({"unexpected": 1, "value": "v"}, "unknown field"),
    ],
)
def test_credential_mutations_are_bounded(fields: dict[str, Any], message: str) -> None:
    body = {
        "operation": "replace",
        "operationId": "b" * 32,
        "credentialId": "api_key",
        "expectedRevision": 0,
        "expectedSchemaDigest": "0" * 64,
        **fields,
    }
    with pytest.raises(msgspec.ValidationError, match=message) as caught:
        msgspec.json.decode(msgspec.json.encode(body), type=NodeCredentialMutation)
    assert "x" * 64 not in str(caught.value)


def test_a_value_at_the_bound_is_accepted() -> None:
    mutation = NodeCredentialMutation(
        operation="replace",
        operation_id="c" * 32,
        credential_id="k",
        expected_revision=0,
        expected_schema_digest="0" * 64,
        value="é" * 2048,
    )
    assert mutation.value is not None and len(mutation.value.encode()) == 4096


@pytest.mark.slow
def test_a_surface_only_plugin_loads_and_serves_in_a_daemon(
    site: Path, tmp_path: Path, shared_models_dir: Path
) -> None:
    daemon = DaemonProcess(root=tmp_path / "node", models_dir=shared_models_dir)
    daemon.extra_env = site_env(site)
    daemon.start()
    try:
        listing = daemon.get("/v1/capabilities").json()
        ids = {d["id"] for d in listing["capabilities"]}
        assert "settings.echo" in ids, listing
        me = daemon.get("/node_id").json()
        envelope = {
            "call_id": f"t-{time.monotonic_ns()}",
            "capability_id": "settings.echo",
            "version": "1.0.0",
            "descriptor_revision": listing["revisions"]["settings.echo@1.0.0"],
            "caller_node": me,
            "target_node": me,
            "timeout_seconds": 30,
            "payload": {"text": "hi"},
        }
        response = httpx.post(f"{daemon.url}/v1/capabilities/call", json=envelope, timeout=60)
        assert response.status_code == 200
        body = response.json()
        assert body["ok"] is True and body["result"] == {"text": "echo: hi"}, body
        assert "extension settings-echo" in daemon.log_text()
        assert "loaded" in daemon.log_text()
    finally:
        daemon.kill()
