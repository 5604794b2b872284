from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.plugins.lean_environment import lean_python
from tests.plugins.runtime_copies import SessionRuntime


@pytest.fixture(scope="session")
def session_runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionRuntime]:
    """One staging per session (per xdist worker); modules take sealed copies of it.

    Setup runs from the lean environment (``tests/plugins/lean_environment.py``), so the
    staging and every later walk of its seal cover a few hundred megabytes, not the
    suite's whole environment; a module that runs setup again over a copy uses
    :attr:`SessionRuntime.python` too, so that setup finds the same source and reuses it.

    ``tests/plugins/test_service_runtime.py`` owns this service root (it checks what
    setup staged, then tampers with it, restoring each change); the others copy."""
    python = lean_python(request.config.rootpath / ".pytest_cache")
    base = tmp_path_factory.mktemp("svc-runtime")
    (base / "home").mkdir()
    env = {**os.environ, "HOME": str(base / "home"), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("SKULK_PLUGIN_SERVICE_ROOT", None)
    home = ["--root", str(base / "service"), "--config-home", str(base / "config")]
    started = time.monotonic()
    done = subprocess.run(
        [str(python), "-m", "skulk_cli.plugin_service", "setup", *home],
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
    yield SessionRuntime(base, env, done, seconds, generation, python)
    # NOTE: the staging is a full copy of the lean environment; keep no copies around.
    shutil.rmtree(base / "service", ignore_errors=True)
