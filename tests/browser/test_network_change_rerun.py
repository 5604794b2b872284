"""The browser package's one retry: a test whose page saw the host's network change
(another worker adding a veth pair) runs once more; every other failure stands.

The hook (``pytest_runtest_protocol`` in this package's conftest) runs in a child
pytest over three tests that fake what a page's console logs, so what is checked is
the report a developer reads: which tests passed, failed, and how often each ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.daemon_process import REPO_ROOT

TESTS = """
import json, os
from pathlib import Path

from tests.browser.conftest import NETWORK_CHANGED, Console, _consoles

RUNS = Path(os.environ["RUNS_FILE"])


def _ran(name: str) -> int:
    runs = json.loads(RUNS.read_text()) if RUNS.exists() else {}
    runs[name] = runs.get(name, 0) + 1
    RUNS.write_text(json.dumps(runs))
    return runs[name]


def _page_saw(line: str) -> None:
    console = Console()
    _consoles.append(console)
    console.failed_loads.append(line)


def test_network_changed_once() -> None:
    if _ran("once") == 1:
        _page_saw(f"Failed to load resource: net::{NETWORK_CHANGED} at http://h/app.js")
        raise AssertionError("the module did not load")


def test_network_changed_every_time() -> None:
    _ran("always")
    _page_saw(f"Failed to load resource: net::{NETWORK_CHANGED} at http://h/app.js")
    raise AssertionError("the module did not load")


def test_a_real_failure() -> None:
    _ran("real")
    _page_saw("Failed to load resource: the server responded with a status of 500")
    raise AssertionError("the page is wrong")


def test_a_pass_after_a_network_change() -> None:
    _ran("passes")
    _page_saw(f"Failed to load resource: net::{NETWORK_CHANGED} at http://h/app.js")
"""


def test_only_a_failure_the_network_change_explains_runs_again(tmp_path: Path) -> None:
    (tmp_path / "test_pages.py").write_text(TESTS, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    runs = tmp_path / "runs.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.browser.conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            "test_pages.py",
        ],
        check=False,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "RUNS_FILE": str(runs), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert "PASSED test_pages.py::test_network_changed_once" in out, out
    assert "FAILED test_pages.py::test_network_changed_every_time" in out, out
    assert "FAILED test_pages.py::test_a_real_failure" in out, out
    assert "PASSED test_pages.py::test_a_pass_after_a_network_change" in out, out
    assert "2 failed, 2 passed" in out, out
    assert json.loads(runs.read_text()) == {"once": 2, "always": 2, "real": 1, "passes": 1}
