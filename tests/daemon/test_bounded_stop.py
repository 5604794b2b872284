"""A stop ends within its deadline whatever it was waiting for, and a second signal
ends it at once; both say what the stop was still waiting for. Real daemons whose
fabric close never returns (``tests/daemon/hanging_stop_daemon.py``)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from skulk_daemon.system.stopping import EXIT_STOP_ABANDONED
from tests.daemon.hanging_stop_daemon import HANGING_STOP_LAUNCHER, TEST_DEADLINE_SECONDS
from tests.daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

EXIT_MARGIN_SECONDS = 10.0
"""How long after the deadline the process may take to be gone (slow CI hosts)."""


def _daemon(root: Path, models_dir: Path, **env: str) -> DaemonProcess:
    return DaemonProcess(
        root=root, models_dir=models_dir, launcher=HANGING_STOP_LAUNCHER, extra_env=env
    ).start()


@pytest.mark.parametrize("hang", ["await", "loop"])
def test_a_hung_stop_exits_at_the_deadline_naming_what_it_waited_for(
    tmp_path: Path, shared_models_dir: Path, hang: str
) -> None:
    daemon = _daemon(tmp_path / "node", shared_models_dir, SKULK_TEST_HANG=hang)
    try:
        started = time.monotonic()
        code, log = daemon.stop(signal.SIGTERM, timeout=TEST_DEADLINE_SECONDS + EXIT_MARGIN_SECONDS)
        took = time.monotonic() - started
    finally:
        daemon.kill()
    assert code == EXIT_STOP_ABANDONED
    assert took >= TEST_DEADLINE_SECONDS - 0.5
    assert f"the stop did not finish within {TEST_DEADLINE_SECONDS:g} s" in log
    assert "still waiting for the fabric to close" in log


@pytest.mark.parametrize("hang", ["await", "loop"])
def test_a_second_signal_exits_at_once(tmp_path: Path, shared_models_dir: Path, hang: str) -> None:
    daemon = _daemon(tmp_path / "node", shared_models_dir, SKULK_TEST_HANG=hang)
    process = daemon.process
    assert process is not None
    try:
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TEST_DEADLINE_SECONDS
        while "received SIGTERM, stopping" not in daemon.log_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # well into the stop, which now hangs
        sent = time.monotonic()
        code, log = daemon.stop(signal.SIGINT, timeout=TEST_DEADLINE_SECONDS)
        took = time.monotonic() - sent
    finally:
        daemon.kill()
    assert code == EXIT_STOP_ABANDONED
    assert took < TEST_DEADLINE_SECONDS / 2
    assert "received SIGINT again: exiting now" in log
    assert "still waiting for" in log
