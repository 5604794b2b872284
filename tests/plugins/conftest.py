from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.plugins.runtime_copies import SessionRuntime


@pytest.fixture(scope="session")
def session_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionRuntime]:
    """One staging per session (per xdist worker); modules take sealed copies of it.

    ``tests/plugins/test_service_runtime.py`` owns this service root (it checks what
    setup staged, then tampers with it, restoring each change); the others copy."""
    base = tmp_path_factory.mktemp("svc-runtime")
    (base / "home").mkdir()
    env = {**os.environ, "HOME": str(base / "home"), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("SKULK_PLUGIN_SERVICE_ROOT", None)
    home = ["--root", str(base / "service"), "--config-home", str(base / "config")]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "skulk_cli.plugin_service", "setup", *home],
        capture_output=True,
        text=True,
        env=env,
        cwd=base,
        timeout=300,
        check=False,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    current = base / "service" / "runtimes" / "current"
    generation = current.parent / os.readlink(current)
    yield SessionRuntime(base, env, done, seconds, generation)
    # NOTE: the staging is a full copy of this environment; keep no copies around.
    shutil.rmtree(base / "service", ignore_errors=True)
