"""Extension lifetimes on real daemons (no model needed): the kill switch, and a
shutdown whose ``on_stop`` hooks raise, take a while, or hang past the budget.

The shutdown runs under a 3 s budget (``tests/daemon/short_budget_daemon.py``) rather
than the real 30 s; ``test_extensions_runtime`` checks the budget's rules on the host
itself."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.daemon.short_budget_daemon import SHORT_BUDGET_LAUNCHER, TEST_BUDGET_SECONDS
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, read_records, site_env, wait_record

pytestmark = pytest.mark.slow

EXIT_MARGIN_SECONDS = 20.0
"""A node must be gone this soon after the shared on_stop budget is spent."""


def _site(root: Path) -> Path:
    site = root / "site"
    install_fixture("middleware-probe", site)
    install_fixture("faulty-extensions", site)
    return site


def test_the_kill_switch_skips_discovery(tmp_path: Path, shared_models_dir: Path) -> None:
    records = tmp_path / "probe.jsonl"
    daemon = DaemonProcess(
        root=tmp_path / "node",
        models_dir=shared_models_dir,
        extra_env=site_env(
            _site(tmp_path), SKULK_PROBE_OUT=str(records), SKULK_EXTENSIONS_DISABLE="1"
        ),
    )
    daemon.start()
    try:
        assert daemon.get("/state").status_code == 200
        code, log = daemon.stop()
    finally:
        daemon.kill()
    assert code == 0
    assert "extensions disabled (SKULK_EXTENSIONS_DISABLE=1)" in log
    # NOTE: only the loader's own lines: the log is the whole node's, and under a
    # parallel suite a stray dialer from another test can make the fabric log a
    # refused handshake on a reused port.
    extension_lines = [line for line in log.splitlines() if "extension" in line]
    assert not [line for line in extension_lines if " loaded" in line or "refused" in line]
    # Nothing was imported or constructed, so no hook ever ran.
    assert read_records(records) == []


def test_shutdown_runs_every_on_stop_under_one_budget_and_exits_past_a_hang(
    tmp_path: Path, shared_models_dir: Path
) -> None:
    records = tmp_path / "probe.jsonl"
    daemon = DaemonProcess(
        root=tmp_path / "node",
        models_dir=shared_models_dir,
        extra_env=site_env(
            _site(tmp_path), SKULK_PROBE_OUT=str(records), SKULK_PROBE_STOP_SECONDS="1"
        ),
        launcher=SHORT_BUDGET_LAUNCHER,
    )
    daemon.start()
    try:
        wait_record(records, "on_start")
        # NOTE: stop() raises if the node is still running after the timeout: that is
        # the assertion that a hanging hook cannot hold the node.
        code, log = daemon.stop(signal.SIGTERM, timeout=TEST_BUDGET_SECONDS + EXIT_MARGIN_SECONDS)
    finally:
        daemon.kill()
    assert code == 0
    kinds = [record["kind"] for record in read_records(records)]
    assert kinds.count("on_start") == 1
    # The hooks ran concurrently: the hanger (last in load order) began before the
    # probe's 1 s on_stop ended, and the probe finished while the hanger hung. A
    # raising on_stop did not stop the others.
    assert {"stop_begin", "stop_end", "hanger_stop_begin", "raiser_on_stop"} <= set(kinds)
    assert kinds.index("hanger_stop_begin") < kinds.index("stop_end")
    assert kinds.index("stop_end") < kinds.index("hanger_cancelled")
    assert "extension hook-raiser: on_stop raised; skipped" in log
    assert (
        "extension on_stop hook(s) of stop-hanger still running after the "
        f"{TEST_BUDGET_SECONDS:.0f} s shutdown budget; cancelled" in log
    )
    assert "on_stop of stop-hanger ignored cancellation; exiting without it" in log
