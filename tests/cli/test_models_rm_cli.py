"""`skulk models rm` across the cluster, against the stand-in node: every member is
asked to remove the files, and a member that cannot be reached is named, keeps the
card in place and fails the command with the fix."""

from __future__ import annotations

from typing import Any

from .fake_node import MODELS, PEER_NODE, THIS_NODE, FakeNode
from .test_cli import flat, run

CUSTOM = "acme/tiny-GGUF"
CARD: dict[str, Any] = {
    "id": CUSTOM,
    "object": "model",
    "catalog_source": "custom",
    "installed": True,
    "capabilities": ["text"],
    "tags": [],
}
DELETED = {"node_id": THIS_NODE, "model_id": CUSTOM, "status": "deleted"}


def _with_custom_card(node: FakeNode) -> None:
    node.routes[("GET", "/v1/models")] = (200, {**MODELS, "data": [*MODELS["data"], CARD]})
    node.routes[("DELETE", f"/models/custom/{CUSTOM}")] = (200, {"status": "deleted"})


def test_models_rm_removes_the_files_on_every_member_then_the_card(node: FakeNode) -> None:
    _with_custom_card(node)
    for member in (THIS_NODE, PEER_NODE):
        node.routes[("DELETE", f"/download/{member}/{CUSTOM}")] = (200, DELETED)

    result = run("--api-url", node.url, "models", "rm", CUSTOM)

    assert result.exit_code == 0, result.output
    assert f"Removed {CUSTOM}: its files on this node, bravo (node-b2), its card." in flat(
        result.stdout
    )
    assert len(node.sent("DELETE", f"/models/custom/{CUSTOM}")) == 1


def test_a_member_that_cannot_be_reached_is_named_and_the_card_stays(node: FakeNode) -> None:
    _with_custom_card(node)
    node.routes[("DELETE", f"/download/{THIS_NODE}/{CUSTOM}")] = (200, DELETED)
    unreachable = {
        "error": {
            "message": f"node {PEER_NODE} could not be reached: timed out",
            "type": "bad_gateway",
            "code": "node_unreachable",
        }
    }
    node.routes[("DELETE", f"/download/{PEER_NODE}/{CUSTOM}")] = (502, unreachable)

    result = run("--api-url", node.url, "models", "rm", CUSTOM)

    assert result.exit_code == 1
    said = flat(result.output)
    assert f"{CUSTOM} could not be removed from bravo (node-b2)" in said
    assert f"Run `skulk models rm {CUSTOM}` again once it is reachable" in said
    assert node.sent("DELETE", f"/models/custom/{CUSTOM}") == []


def test_a_member_that_holds_nothing_is_not_an_error(node: FakeNode) -> None:
    _with_custom_card(node)
    node.routes[("DELETE", f"/download/{THIS_NODE}/{CUSTOM}")] = (200, DELETED)
    # The peer answers 404 (no route in the stand-in): it holds no copy.

    result = run("--api-url", node.url, "models", "rm", CUSTOM)

    assert result.exit_code == 0, result.output
    assert f"Removed {CUSTOM}: its files on this node, its card." in flat(result.stdout)
