"""A partition heals without losing what either side changed.

The master is cut off the LAN; both sides then change State (each adds a custom card,
through its own machine's loopback as an operator would). On the heal the side with
the newer term wins and the other installs its snapshot; the change made on the
losing side is submitted again by the node that made it, so every node ends with
both cards, and the losing node's diagnostics say what it resubmitted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import custom_card
from tests.lan.daemons import LanDaemon, lan_cluster
from tests.lan.netns import Machine
from tests.lan.test_lan_cluster import converge, election_log, node_id, state

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]

_CALL = """
import json, sys, httpx
method, path, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
r = httpx.request(method, "http://127.0.0.1:52415" + path, json=body, timeout=30)
print(json.dumps({"status": r.status_code, "body": r.json()}))
"""


def on_machine(machine: Machine, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """A request from the machine itself (its loopback): what the owner may do."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            machine.namespace,
            sys.executable,
            "-c",
            _CALL,
            method,
            path,
            json.dumps(body),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def cards(daemon: LanDaemon) -> set[str]:
    view = state(daemon)
    return set() if view is None else set(view.get("customModelCards", {}))


def test_changes_on_both_sides_of_a_partition_survive_the_heal(
    tmp_path: Path, shared_models_dir: Path
) -> None:
    with lan_cluster(tmp_path, shared_models_dir, 3) as (net, daemons):
        master, term = converge(daemons, 3)
        index = next(i for i, d in enumerate(daemons) if node_id(d) == master)
        lone, lone_machine = daemons[index], net.machines[index]
        rest = [d for d in daemons if d is not lone]
        rest_machine = net.machines[daemons.index(rest[0])]
        lone_machine.disconnect()
        try:
            _, majority_term = converge(rest, 2, timeout=30)
            assert majority_term > term
            # Each side changes State: the lone node is still master of its own side.
            made = on_machine(
                lone_machine,
                "POST",
                "/models/add-card",
                {"model_card": custom_card("test/lone-side")},
            )
            assert made["status"] in (200, 201), made
            made = on_machine(
                rest_machine,
                "POST",
                "/models/add-card",
                {"model_card": custom_card("test/majority-side")},
            )
            assert made["status"] in (200, 201), made
        finally:
            lone_machine.reconnect()
        converge(daemons, 3)
        both = {"test/lone-side", "test/majority-side"}
        try:
            wait_for(lambda: all(cards(d) >= both for d in daemons), "both cards everywhere", 30)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {[sorted(cards(d)) for d in daemons]}\n{election_log(daemons)}"
            ) from None
        recoveries = lone.get("/v1/diagnostics/node").json()["partitionRecoveries"]
        assert [(r["change"], r["outcome"]) for r in recoveries] == [
            ("custom card for test/lone-side", "applied")
        ]
        assert "submitting them again" in lone.log_text()
