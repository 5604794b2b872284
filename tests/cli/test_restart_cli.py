"""`skulk restart NODE` against the stand-in node: how NODE is resolved to the stable
install id, what is sent, and what is printed or refused."""

from __future__ import annotations

import json

import pytest

from .fake_node import PEER_NODE, STATE, THIS_NODE, FakeNode
from .test_cli import flat, run

PEER_INSTALL_ID = STATE["nodeIdentities"][PEER_NODE]["nodeInstallId"]
THIS_INSTALL_ID = STATE["nodeIdentities"][THIS_NODE]["nodeInstallId"]


@pytest.mark.parametrize("name", ["bravo", PEER_NODE, PEER_INSTALL_ID])
def test_restart_targets_the_peers_stable_install_id(node: FakeNode, name: str) -> None:
    node.routes[("POST", "/admin/restart")] = (
        200,
        {"status": "restart_sent", "node_id": PEER_NODE, "node_install_id": PEER_INSTALL_ID},
    )

    result = run("--api-url", node.url, "restart", name)

    assert result.exit_code == 0, result.output
    [sent] = node.sent("POST", "/admin/restart")
    assert sent.query == {"node_install_id": [PEER_INSTALL_ID]}
    assert "Restart sent to bravo (node-b2)" in flat(result.stdout)


def test_restart_json_prints_the_nodes_answer(node: FakeNode) -> None:
    answer = {"status": "restarting", "node_id": THIS_NODE, "node_install_id": THIS_INSTALL_ID}
    node.routes[("POST", "/admin/restart")] = (200, answer)

    result = run("--api-url", node.url, "restart", "alpha", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == answer


def test_restart_of_an_unknown_node_sends_nothing(node: FakeNode) -> None:
    result = run("--api-url", node.url, "restart", "charlie")

    assert result.exit_code == 1
    assert "no node is named 'charlie'" in flat(result.output)
    assert node.sent("POST", "/admin/restart") == []


def test_restart_already_pending_is_refused(node: FakeNode) -> None:
    message = "a restart of this node is already pending"
    node.routes[("POST", "/admin/restart")] = (
        409,
        {
            "status": "restart_already_pending",
            "error": {
                "message": message,
                "type": "conflict_error",
                "code": "restart_already_pending",
            },
        },
    )

    result = run("--api-url", node.url, "restart", THIS_NODE)

    assert result.exit_code == 1
    assert message in flat(result.output)


def test_restart_without_node_on_a_cluster_of_several_asks_which(node: FakeNode) -> None:
    result = run("--api-url", node.url, "restart")

    assert result.exit_code == 2, result.output
    assert "name the one to restart" in flat(result.output)
    assert "alpha" in flat(result.output) and "bravo" in flat(result.output)
    assert node.sent("POST", "/admin/restart") == []
