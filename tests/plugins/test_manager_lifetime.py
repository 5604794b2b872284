"""The manager's lifetime fence (``server.serving_lifetime``), with real manager processes.

Proves: a second manager on a root where one answers is refused at once (exit 1, the
first keeps serving); a manager started while the fence is held by someone who does not
answer (a stopping manager closing its owners, or the host selecting a runtime) waits,
and serves once the fence is free; the host reads the answering manager's process id
from the socket (``call_with_peer``), and a manager it stops that way exits cleanly.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from skulk_daemon.plugins.manager_refresh import stop_manager
from skulk_host.plugin_manager.client import call, call_with_peer
from skulk_host.plugin_manager.runtime import lifetime_fence
from tests.plugins.manager_process import REPO_ROOT, Manager


def _serve(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "skulk_host.plugin_manager", "serve", "--root", str(root)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _answers(root: Path) -> bool:
    with contextlib.suppress(Exception):
        return bool(call(root, {"action": "list"}, timeout=2)["ok"])
    return False


def test_a_second_manager_is_refused_while_one_answers(tmp_path: Path) -> None:
    root = tmp_path / "manager"
    first = Manager(root).start()
    try:
        second = _serve(root)
        output, _ = second.communicate(timeout=60)
        assert second.returncode == 1, output
        assert "Another manager already answers on this root" in output
        assert first.process is not None and first.process.poll() is None
        assert _answers(root)
    finally:
        first.kill()


def test_a_manager_waits_for_the_fence_then_serves(tmp_path: Path) -> None:
    root = tmp_path / "manager"
    with lifetime_fence(root, 0.0) as held:
        assert held
        waiting = _serve(root)
        try:
            time.sleep(3)
            assert waiting.poll() is None  # not refused: nobody answers, so it waits
            assert not _answers(root)
        except BaseException:
            waiting.kill()
            raise
    try:
        deadline = time.monotonic() + 60
        while not _answers(root):
            assert waiting.poll() is None, waiting.communicate()[0]
            assert time.monotonic() < deadline, "the waiting manager never served"
            time.sleep(0.2)
        answer, pid = call_with_peer(root, {"action": "list"})
        assert answer["ok"] and pid == waiting.pid
        stop_manager(pid, seconds=30)
        assert waiting.wait(timeout=5) == 0
        with lifetime_fence(root, 0.0) as free:
            assert free  # released with its last owner
    finally:
        if waiting.poll() is None:
            waiting.kill()
        waiting.communicate()
