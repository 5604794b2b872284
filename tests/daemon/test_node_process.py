"""The real daemon as a subprocess: restarts, signals, start-up failures and the event
log on disk. What its routes answer is checked in-process (tests/api/test_node_api.py)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.daemon_process import DaemonFactory, DaemonProcess

REVISION = "0123456789abcdef0123456789abcdef01234567"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared_node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One node for the tests below that need one running: the restart test restarts
    it, the port test leaves it running, the SIGTERM test (after them) stops it."""
    daemon = DaemonProcess(root=tmp_path_factory.mktemp("node"), models_dir=shared_models_dir)
    yield daemon
    daemon.kill()


@pytest.fixture
def running(shared_node: DaemonProcess) -> DaemonProcess:
    """The module's node, started again if an earlier test stopped it."""
    if shared_node.process is None or shared_node.process.poll() is not None:
        shared_node.start()
    return shared_node


def test_restart_keeps_node_id_and_replays_state(running: DaemonProcess) -> None:
    daemon = running
    node_id = daemon.get("/node_id").json()
    install_id = daemon.get("/state").json()["nodeIdentities"][node_id]["nodeInstallId"]
    card = {
        "modelId": "org/restart-proof",
        "sourceRepository": "org/restart-proof",
        "sourceRevision": REVISION,
        "storageSize": {"inBytes": 1234},
        "nLayers": 4,
        "hiddenSize": 64,
        "supportsTensor": False,
        "tasks": ["TextGeneration"],
        "ggufFile": "model-Q4_K_M.gguf",
    }
    added = httpx.post(f"{daemon.url}/models/add-card", json={"model_card": card}, timeout=30)
    assert added.status_code in (200, 201), added.text
    before = daemon.get("/state").json()
    events_before = daemon.get("/events").json()

    code, err = daemon.stop(signal.SIGINT)
    assert code == 0, err
    assert key_file_mode(daemon) == 0o600

    daemon.start()
    assert daemon.get("/node_id").json() == node_id
    after = daemon.get("/state").json()
    assert after["nodeIdentities"][node_id]["nodeInstallId"] == install_id
    ids = [m["id"] for m in daemon.get("/v1/models").json()["data"]]
    assert "org/restart-proof" in ids
    # the restart registered the node again: the log grew, history was kept
    assert after["lastEventAppliedIdx"] > before["lastEventAppliedIdx"]
    events_after = daemon.get("/events").json()
    assert events_after[: len(events_before)] == events_before
    assert [e["idx"] for e in events_after] == list(range(len(events_after)))


def key_file_mode(daemon: DaemonProcess) -> int:
    return (daemon.data_dir / "node_key.pem").stat().st_mode & 0o777


def test_port_in_use_is_a_clear_error(running: DaemonProcess, make_daemon: DaemonFactory) -> None:
    second = make_daemon("second")
    second.port = running.port
    code, err = second.run_to_exit()
    assert code == 1
    assert f"port {running.port}" in err and "already in use" in err
    assert "Traceback" not in err
    # the first node is untouched
    assert running.get("/node_id").status_code == 200


def test_sigterm_stops_cleanly(running: DaemonProcess) -> None:
    earlier = len(running.log_text())  # an earlier test may have stopped it already
    code, log = running.stop(signal.SIGTERM)
    assert code == 0, log
    assert "stopped cleanly" in log[earlier:]


def test_unknown_config_key_refuses_to_start(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    daemon.config_home.mkdir(parents=True)
    (daemon.config_home / "skulk.yaml").write_text("logging:\n  colour: red\n")
    code, err = daemon.run_to_exit()
    assert code == 1
    assert "'logging.colour'" in err
    assert "Traceback" not in err


def test_a_kv_cache_override_no_runner_could_use_refuses_to_start(
    make_daemon: DaemonFactory,
) -> None:
    daemon = make_daemon(SKULK_KV_CACHE_BACKEND="q8_0")
    daemon.config_home.mkdir(parents=True)
    (daemon.config_home / "skulk.yaml").write_text("inference:\n  flash_attention: off\n")
    code, err = daemon.run_to_exit()
    assert code == 1
    assert "SKULK_KV_CACHE_BACKEND: a q8_0 KV cache needs flash attention" in err
    assert "Traceback" not in err


def test_unusable_data_dir_is_a_clear_error(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    daemon.root.mkdir(parents=True)
    (daemon.root / "data").write_text("a file where the data dir should be")
    code, err = daemon.run_to_exit()
    assert code == 1
    assert "data directory" in err
    assert (daemon.root / "data").read_text() == "a file where the data dir should be"


def test_torn_event_log_tail_recovers_and_says_so(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon().start()
    events = daemon.get("/events").json()
    daemon.stop()
    log_path = daemon.data_dir / "events.log"
    with log_path.open("ab") as handle:
        handle.write(b"\x00\x00\x01\x00torn")
    daemon.start()
    code, err = daemon.stop()
    assert code == 0
    assert "dropped a torn record" in err
    assert daemon.start().get("/events").json()[: len(events)] == events


def test_corrupt_event_log_refuses_to_start_and_keeps_the_file(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon().start()
    # One run logs several records (the node joined, it was elected master), so the
    # damage below is inside a record with records after it.
    assert len(daemon.get("/events").json()) > 1
    daemon.stop()
    log_path = daemon.data_dir / "events.log"
    data = bytearray(log_path.read_bytes())
    data[20] ^= 0xFF  # inside the first record's payload, with records after it
    log_path.write_bytes(bytes(data))
    code, err = daemon.run_to_exit()
    assert code == 1
    assert "corrupt at byte offset 8" in err
    assert log_path.read_bytes() == bytes(data)
