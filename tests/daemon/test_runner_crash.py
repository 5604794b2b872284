"""A runner that dies mid-stream, on a real daemon: the stream ends with an error and
the instance is failed as runner_crashed (moved from test_first_token, whose other
cases run in-process in tests/api)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import DEMO, PROMPT, place, sse_lines, wait_for
from tests.daemon_process import DaemonProcess
from tests.runner_processes import runner_processes

pytestmark = pytest.mark.slow


def _runner_pids(daemon: DaemonProcess) -> list[int]:
    assert daemon.process is not None
    return [child.pid for child in runner_processes(daemon.process.pid)]


def test_runner_killed_mid_stream_fails_loudly(tmp_path: Path, shared_models_dir: Path) -> None:
    daemon = DaemonProcess(root=tmp_path, models_dir=shared_models_dir).start()
    try:
        instance_id = place(daemon, context=512)
        body = {"model": DEMO, "messages": PROMPT, "max_tokens": 400, "stream": True}
        url = f"{daemon.url}/v1/chat/completions"
        with httpx.stream("POST", url, json=body, timeout=120) as r:
            lines = sse_lines(r)
            next(ln for ln in lines if ln.startswith("data: {"))
            for pid in _runner_pids(daemon):
                os.kill(pid, signal.SIGKILL)
            rest = list(lines)
        assert rest[-1] == "data: [DONE]"
        assert any('"error"' in ln for ln in rest)

        def failure_recorded() -> dict[str, Any] | None:
            state = daemon.get("/state").json()
            if instance_id in state["instances"]:
                return None
            return next(
                (f for f in state["instanceFailures"] if f["instanceId"] == instance_id), None
            )

        failure = wait_for(failure_recorded, "the failure to be recorded", timeout=30)
        assert failure["errorCode"] == "runner_crashed"
        assert failure["errorMessage"]
    finally:
        daemon.kill()
