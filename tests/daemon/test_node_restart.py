"""``POST /admin/restart`` on a real daemon: the process re-executes in place (same
pid), answers again with the same node id, and the instance placed before it is still
placed and serving once its runner has loaded again."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.daemon.serving import place, wait_for
from tests.daemon_process import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.slow

RESTARTED = "restarting in place"


def _restarted(daemon: DaemonProcess, offset: int) -> DaemonProcess:
    """Until the re-executed daemon answers (the old one's log says it re-executed)."""
    wait_for(lambda: RESTARTED in daemon.log_text()[offset:], "the node to re-execute", 90)
    return daemon.wait_ready()


def test_restart_keeps_pid_node_id_and_placements(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon().start()
    assert daemon.process is not None
    pid = daemon.process.pid
    node_id = daemon.get("/node_id").json()
    install_id = daemon.get("/state").json()["nodeIdentities"][node_id]["nodeInstallId"]
    instance_id = place(daemon)
    offset = len(daemon.log_text())

    answer = daemon.post("/admin/restart", params={"node_install_id": install_id})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "status": "restarting",
        "node_id": node_id,
        "node_install_id": install_id,
    }
    again = daemon.post("/admin/restart")
    assert again.status_code == 409, again.text
    assert again.json()["status"] == "restart_already_pending"

    _restarted(daemon, offset)
    assert daemon.process.poll() is None
    assert daemon.process.pid == pid
    assert daemon.get("/node_id").json() == node_id
    state = daemon.get("/state").json()
    assert state["nodeIdentities"][node_id]["nodeInstallId"] == install_id
    assert instance_id in state["instances"]
    wait_for(lambda: daemon.runner_status(instance_id) == "RunnerReady", "RunnerReady again")
    chat = httpx.post(
        f"{daemon.url}/v1/chat/completions",
        json={
            "model": "local/gemma-3-270m-q4_k_m",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2,
        },
        timeout=120,
    )
    assert chat.status_code == 200, chat.text

    # The re-executed node stops as any other does.
    code, log = daemon.stop(signal.SIGINT)
    assert code == 0, log
    assert log.count("stopped cleanly") == 2


def test_legacy_node_id_restart_answers_without_install_id(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon().start()
    node_id = daemon.get("/node_id").json()
    offset = len(daemon.log_text())
    answer = daemon.post("/admin/restart", params={"node_id": node_id})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "restarting", "node_id": node_id}
    _restarted(daemon, offset)
    assert daemon.get("/node_id").json() == node_id


def test_restart_of_a_peer_is_sent_to_it(make_daemon: DaemonFactory) -> None:
    first = make_daemon("first").start()
    second = make_daemon("second")
    second.peers = [first.fabric_address]
    second.start()
    peer_id = second.get("/node_id").json()

    def peer_install_id() -> str | None:
        identity = first.get("/state").json()["nodeIdentities"].get(peer_id)
        return identity["nodeInstallId"] if identity else None

    install_id = wait_for(peer_install_id, "the peer's telemetry on the first node", 60)
    offset = len(second.log_text())
    answer = first.post("/admin/restart", params={"node_install_id": install_id})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "status": "restart_sent",
        "node_id": peer_id,
        "node_install_id": install_id,
    }
    _restarted(second, offset)
    assert second.get("/node_id").json() == peer_id
    # The API node itself was not restarted.
    assert RESTARTED not in first.log_text()
