"""``skulk-plugin-service setup`` stages a sealed manager runtime, and the manager runs
from it: the session's one real staging (a full copy of this environment, ~1.2 GB, whose
service root this module owns), the real CLI and manager as processes, cwd outside the
checkout.

Proves: setup stages, seals and selects a generation (a virtual environment holding real
copies of the Skulk packages, no path back into the checkout, a seal that verifies); the
staged interpreter imports Skulk from the copy even with the checkout on ``PYTHONPATH``
and as cwd, and what its bootstrap runs imports none of the node; a rerun over the same
source reuses the generation and its operation; the sealed manager reports its build and
``reload_runtime`` in ``list``; the host refuses a manager of another build as
``manager_build_differs`` (access and route helper); a changed source is not served by
the first generation, and a second (a sealed copy of the first for another source)
beside it is not selected; ``reload_runtime`` refuses a wrong digest, an unknown and an
incomplete generation, and with the right digest selects the second, records it in
``setup.json`` and exits; a tampered file makes the manager refuse to start and
``status`` report ``registered_runtime_verified: false``; the registered command's
``-I -S -B`` bootstrap refuses a tampered byte, a changed mode, an extra file, a missing one,
a link, a ``.DS_Store`` directory and another interpreter with one line and exit 2,
before any code of the generation runs (planted ``sitecustomize.py``/``.pth`` hooks and
tampered manager code would write a marker; the command from before the bootstrap does
run the tampered code), while Finder's plain leftover files are ignored and the normal
start serves ``list`` without walking the seal twice; the fixed unit's ``ExecStart``,
started as systemd would, runs the selected generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skulk_cli.plugin_service import system_helper
from skulk_core.plugins.answers import ManagerListing
from skulk_core.plugins.errors import PluginRefusal
from skulk_daemon.api.plugin_manager import forward
from skulk_daemon.errors import ApiError
from skulk_daemon.plugins.access import ManagerAccess
from skulk_host.plugin_manager.client import call
from skulk_host.plugin_manager.protocol import GetRequest, ListRequest
from skulk_host.plugin_service import bootstrap, staging
from skulk_host.plugin_service.runtime import (
    ManagerBuildDiffers,
    build_identity,
    read_completion,
    read_seal,
    selected,
    verify,
)
from tests.plugins.manager_process import wait_until_answering
from tests.plugins.runtime_copies import SessionRuntime, own, sealed_copy

pytestmark = pytest.mark.xdist_group("plugin_runtime")

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


@dataclass
class Staged:
    base: Path
    env: dict[str, str]
    summary: dict[str, Any]
    seconds: float
    setup_python: Path
    """The interpreter setup ran from (the lean environment's, as the session's staging)."""

    @property
    def root(self) -> Path:
        return self.base / "service"

    @property
    def config_home(self) -> Path:
        return self.base / "config"

    @property
    def generation(self) -> Path:
        return self.root / "runtimes" / str(self.summary["generation"])

    @property
    def python(self) -> Path:
        return self.root / "runtimes" / "current" / "bin" / "python"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        home = ["--root", str(self.root), "--config-home", str(self.config_home)]
        return subprocess.run(
            [str(self.setup_python), "-m", "skulk_cli.plugin_service", *args, *home],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.base,
            timeout=300,
            check=False,
        )

    def serve(self, log: Path | None = None, *, earlier: bool = False) -> subprocess.Popen[str]:
        """The registered service's fixed command (``earlier``: the form from before the
        bootstrap, which verifies after importing the manager)."""
        # NOTE: the checkout on PYTHONPATH: -I must keep the manager on its own copy.
        command = system_helper.manager_command(self.root, tls=False, earlier=earlier)
        env = {**self.env, "PYTHONPATH": str(REPO_ROOT)}
        if log is None:
            return subprocess.Popen(
                command,
                env=env,
                cwd=self.base,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        with log.open("a") as output:
            return subprocess.Popen(
                command, env=env, cwd=self.base, stdout=output, stderr=subprocess.STDOUT, text=True
            )


def _summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


@pytest.fixture(scope="module")
def staged(session_runtime: SessionRuntime) -> Staged:
    """The session's real staging (this module owns its service root; the other modules
    take sealed copies of its first generation)."""
    print(f"\nstaging the manager runtime took {session_runtime.seconds:.1f} s")
    done = session_runtime.done
    assert "Staged runtime" in done.stdout, done.stdout + done.stderr
    runtime = session_runtime
    return Staged(runtime.base, runtime.env, _summary(done), runtime.seconds, runtime.python)


@pytest.fixture(scope="module")
def manager(staged: Staged) -> Iterator[subprocess.Popen[str]]:
    # Finder's leftovers, plain files, are ignored by the bootstrap's seal check.
    for leftover in (staged.generation / ".DS_Store", staged.generation / SITE / "._cli.py"):
        leftover.write_bytes(b"\x00\x00\x00\x01Bud1")
    log = staged.base / "manager.log"
    started = time.monotonic()
    process = staged.serve(log)
    deadline = started + 120
    while True:
        assert process.poll() is None, log.read_text()
        with contextlib.suppress(Exception):
            if call(staged.root / "manager", {"action": "list"}, timeout=2)["ok"]:
                break
        assert time.monotonic() < deadline, "the staged manager never answered"
        time.sleep(0.2)
    print(f"\nthe sealed manager answered {time.monotonic() - started:.1f} s after start")
    yield process
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=60)


def test_setup_stages_seals_and_selects_a_generation(staged: Staged) -> None:
    summary = staged.summary
    assert (summary["phase"], summary["runtime"], summary["service"]) == (
        "selected",
        "staged",
        "none",
    )
    record = json.loads((staged.root / "setup.json").read_text())
    assert record["generation"] == summary["generation"]
    assert record["seal_sha256"] == summary["seal_sha256"]
    assert record["python"] == str(staged.python)
    assert selected(staged.root) == summary["generation"]
    generation = staged.generation
    completion = verify(generation, summary["seal_sha256"])
    assert completion.files > 1000 and completion.bytes > 10_000_000
    seal = read_seal(generation)
    assert seal.build_sha256 == completion.build_sha256 == record["build_sha256"]
    # The Skulk packages are real copies that measure to the sealed build.
    assert build_identity(generation / SITE) == seal.build_sha256
    for package in ("skulk", "skulk_cli", "skulk_core", "skulk_daemon", "skulk_host"):
        assert f"{SITE}/{package}/__init__.py" in seal.files
    # Nothing points back into the checkout or the live environment.
    assert not any(path.endswith(".pth") for path in seal.files), "an editable hook was copied"
    assert not any(path.endswith("/direct_url.json") and "skulk-" in path for path in seal.files)
    assert all(not target.startswith(str(REPO_ROOT)) for target in seal.links.values())
    assert (generation / "bin" / "python").resolve() == Path(seal.interpreter).resolve()
    script = (generation / "bin" / "skulk-plugin-service").read_text().splitlines()[0]
    assert script == f"#!{generation / 'bin' / 'python'}"
    # The service's entry is the sealed copy of the shared bootstrap module.
    assert "bootstrap.py" in seal.files
    assert (generation / "bootstrap.py").read_bytes() == (
        generation / SITE / "skulk_host" / "plugin_service" / "bootstrap.py"
    ).read_bytes()
    record_rows = (generation / SITE / "skulk-0.1.0.dist-info" / "RECORD").read_text()
    assert "skulk_host/plugin_manager/cli.py,sha256=" in record_rows
    assert staged.seconds < 180


def test_the_staged_interpreter_imports_skulk_from_its_copy(staged: Staged) -> None:
    done = subprocess.run(
        [
            str(staged.python),
            "-I",
            "-B",
            "-c",
            "import skulk_host.plugin_manager.cli as m, litestar; "
            "print(m.__file__); print(litestar.__file__)",
        ],
        env={**staged.env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for line in done.stdout.split():
        assert Path(line).resolve().is_relative_to(staged.generation), line


def test_the_bootstrap_entry_imports_none_of_the_node(staged: Staged) -> None:
    """What the bootstrap runs is the manager's own package: the spec's alias
    (``skulk.extensions.runtime_manager``) imports the node's extension package, about
    500 modules compiled from source at every sealed start (``-B``)."""
    done = subprocess.run(
        [str(staged.python), "-I", "-B", "-X", "importtime", "-m", bootstrap.ENTRY, "--help"],
        env=staged.env,
        cwd=staged.base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "serve" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "skulk_host.plugin_manager.cli" in imported
    node = [name for name in imported if name.startswith(("skulk_daemon", "skulk.extensions"))]
    assert node == []


def test_the_sealed_manager_reports_its_runtime(
    staged: Staged, manager: subprocess.Popen[str]
) -> None:
    assert (staged.generation / ".DS_Store").is_file()  # present, and ignored
    log = (staged.base / "manager.log").read_text()
    generation = staged.summary["generation"]
    assert f"serving from the sealed runtime {generation} (seal verified by the bootstrap)" in log
    listed = call(staged.root / "manager", {"action": "list"})["result"]
    assert listed["reload_runtime"] is True
    assert listed["runtime"] == "staged"
    assert listed["runtime_generation"] == staged.summary["generation"]
    assert listed["build_sha256"] == read_seal(staged.generation).build_sha256
    status = staged.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    body = json.loads(status.stdout)
    assert body["registered_runtime_verified"] is True
    assert body["management_available"] is True
    assert body["running_generation"] == staged.summary["generation"]


def test_a_rerun_reuses_the_completed_generation(
    staged: Staged, manager: subprocess.Popen[str]
) -> None:
    before = sorted(p.name for p in (staged.root / "runtimes").iterdir())
    started = time.monotonic()
    done = staged.cli("setup")
    seconds = time.monotonic() - started
    print(f"\nrerunning setup over the same source took {seconds:.1f} s")
    again = _summary(done)
    assert "Staged runtime" not in done.stdout
    assert again["generation"] == staged.summary["generation"]
    assert again["operation_id"] == staged.summary["operation_id"]
    assert sorted(p.name for p in (staged.root / "runtimes").iterdir()) == before
    assert manager.poll() is None  # the same generation: the running manager is kept


def test_the_host_refuses_a_manager_of_another_build(
    staged: Staged, manager: subprocess.Popen[str]
) -> None:
    build = read_seal(staged.generation).build_sha256
    other = "0" * 64
    access = ManagerAccess(staged.config_home, host_build=other)
    with pytest.raises(ManagerBuildDiffers) as differs:
        asyncio.run(access.call(ListRequest()))
    assert differs.value.code == "manager_build_differs"
    assert build in differs.value.message and other in differs.value.message
    # Until a matching list, nothing else reaches that manager.
    with pytest.raises(ManagerBuildDiffers):
        asyncio.run(access.call(GetRequest(plugin_id="managed.absent")))
    with pytest.raises(ApiError) as routed:
        asyncio.run(forward(access, ListRequest(), ManagerListing))
    assert (routed.value.status_code, routed.value.code) == (503, "manager_build_differs")
    same = ManagerAccess(staged.config_home, host_build=build)
    assert asyncio.run(same.call(ListRequest()))["ok"] is True


def _reload(staged: Staged, generation: str, digest: str) -> dict[str, Any]:
    request = {"action": "reload_runtime", "generation": generation, "manifest_sha256": digest}
    return call(staged.root / "manager", request)


def test_reload_runtime_refuses_then_selects_and_exits(
    staged: Staged, manager: subprocess.Popen[str]
) -> None:
    first = str(staged.summary["generation"])
    # A changed source is not served by the first generation: staging would stage a new
    # one beside it. That one is made here as a sealed copy of the first (hard links,
    # not a second gigabyte; the session's setup is the real staging).
    assert staging._reusable(staged.root, "e" * 64) is None
    completion = sealed_copy(staged.generation, staged.root, source_sha256="e" * 64)
    assert completion.generation != first
    assert read_completion(staged.generation) is not None
    assert selected(staged.root) == first  # a new generation alone selects nothing
    second, seal = completion.generation, completion.seal_sha256
    wrong = _reload(staged, second, str(staged.summary["seal_sha256"]))
    assert wrong["ok"] is False and wrong["error"]["reason"] == "seal_mismatch", wrong
    assert wrong["error"]["code"] == "manager_operation_refused"
    unknown = _reload(staged, "0" * 16, seal)
    assert unknown["ok"] is False and unknown["error"]["reason"] == "not_found", unknown
    incomplete = staged.root / "runtimes" / ("1" * 16)
    (incomplete / "bin").mkdir(parents=True)
    partial = _reload(staged, "1" * 16, seal)
    assert partial["ok"] is False and "not completely staged" in partial["error"]["message"]
    assert selected(staged.root) == first
    assert manager.poll() is None  # refusals leave the manager serving
    done = _reload(staged, second, seal)
    assert done == {
        "ok": True,
        "result": {"generation": second, "selected": True, "restarting": True},
    }
    assert manager.wait(timeout=60) == 0  # it stops for the keep-alive to restart it
    assert selected(staged.root) == second
    record = json.loads((staged.root / "setup.json").read_text())
    assert (record["generation"], record["seal_sha256"]) == (second, seal)
    # status verifies the copy the service now starts from (none answers yet).
    body = json.loads(staged.cli("status").stdout)
    assert (body["registered_runtime_verified"], body["error_code"]) == (
        True,
        "service_unavailable",
    )
    staged.summary = {**staged.summary, "generation": second, "seal_sha256": seal}


def test_a_tampered_runtime_is_refused(staged: Staged) -> None:
    victim = staged.generation / SITE / "skulk_host" / "plugin_manager" / "cli.py"
    own(victim)  # NOTE: other modules' copies hard-link this file: change only this one.
    original = victim.read_bytes()
    victim.write_bytes(original + b"\n# changed\n")
    try:
        process = staged.serve()
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 2, output
        assert "refuses to start" in output and "no longer matches its seal" in output
        assert "skulk_host/plugin_manager/cli.py differs" in output
        status = staged.cli("status")
        assert status.returncode == 1
        body = json.loads(status.stdout)
        assert body["registered_runtime_verified"] is False
        assert body["error_code"] == "registration_or_integrity_unavailable"
    finally:
        victim.write_bytes(original)


MARKER_CODE = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def _bootstrap(staged: Staged, python: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The registered command, run once to its refusal (a marker file says whether any
    planted code of the generation ran)."""
    command = system_helper.manager_command(staged.root, tls=False)
    if python is not None:
        command[0] = str(python)
    return subprocess.run(
        command,
        env={**staged.env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=staged.base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextlib.contextmanager
def _tampered_manager_code(staged: Staged) -> Iterator[str]:
    """The manager's cli.py, same size, running planted code when it is imported: only
    its SHA-256 differs."""
    victim = staged.generation / SITE / "skulk_host" / "plugin_manager" / "cli.py"
    original = victim.read_bytes()
    future = b"from __future__ import annotations\n"
    payload = MARKER_CODE.format(marker=str(staged.base / "marker")).encode()
    # NOTE: the docstring gives up as many characters as the payload takes.
    changed = original[:3] + original[3 + len(payload) :].replace(future, future + payload, 1)
    assert len(changed) == len(original) and changed != original
    compile(changed, "cli.py", "exec")
    own(victim)  # NOTE: other modules' copies hard-link this file: change only this one.
    victim.write_bytes(changed)
    try:
        yield f"{SITE}/skulk_host/plugin_manager/cli.py"
    finally:
        victim.write_bytes(original)


@contextlib.contextmanager
def _planted_startup_hooks(staged: Staged) -> Iterator[str]:
    """A sitecustomize.py and a .pth in site-packages: normal site initialisation would
    run both (checked), -S runs neither and the bootstrap refuses the extra members."""
    site = staged.generation / SITE
    hook = MARKER_CODE.format(marker=str(staged.base / "marker"))
    (site / "sitecustomize.py").write_text(hook)
    (site / "zz-planted.pth").write_text(hook)
    try:
        live = subprocess.run(
            [str(staged.python), "-I", "-B", "-c", "pass"], env=staged.env, timeout=60, check=True
        )
        assert live.returncode == 0 and (staged.base / "marker").read_text() == "ran"
        (staged.base / "marker").unlink()
        yield f"{SITE}/sitecustomize.py"
    finally:
        for planted in ("sitecustomize.py", "zz-planted.pth"):
            (site / planted).unlink(missing_ok=True)


@contextlib.contextmanager
def _changed_mode(staged: Staged) -> Iterator[str]:
    victim = staged.generation / SITE / "skulk_core" / "__init__.py"
    own(victim)  # NOTE: a mode is the inode's: other modules' copies share it.
    mode = victim.stat().st_mode
    victim.chmod(0o755)
    try:
        yield f"{SITE}/skulk_core/__init__.py"
    finally:
        victim.chmod(mode)


@contextlib.contextmanager
def _missing_file(staged: Staged) -> Iterator[str]:
    victim = staged.generation / SITE / "msgspec" / "__init__.py"
    aside = staged.base / "aside.py"
    victim.rename(aside)
    try:
        yield f"{SITE}/msgspec/__init__.py"
    finally:
        aside.rename(victim)


@contextlib.contextmanager
def _file_made_a_link(staged: Staged) -> Iterator[str]:
    """A sealed file replaced by a link to an identical copy: links are refused."""
    victim = staged.generation / SITE / "skulk" / "__init__.py"
    aside = staged.base / "identical.py"
    victim.rename(aside)
    victim.symlink_to(aside)
    try:
        yield f"{SITE}/skulk/__init__.py"
    finally:
        victim.unlink()
        aside.rename(victim)


@contextlib.contextmanager
def _leftover_directory(staged: Staged) -> Iterator[str]:
    """A directory named like Finder's leftovers is a member, not a leftover."""
    directory = staged.generation / SITE / ".DS_Store"
    directory.mkdir()
    try:
        yield f"{SITE}/.DS_Store"
    finally:
        directory.rmdir()


TAMPERINGS = {
    "a tampered byte": _tampered_manager_code,
    "a changed mode": _changed_mode,
    "an extra file": _planted_startup_hooks,
    "a missing file": _missing_file,
    "a symlink": _file_made_a_link,
    "a .DS_Store directory": _leftover_directory,
}


@pytest.mark.parametrize("case", list(TAMPERINGS))
def test_the_bootstrap_refuses_before_importing_anything(staged: Staged, case: str) -> None:
    marker = staged.base / "marker"
    with TAMPERINGS[case](staged) as path:
        done = _bootstrap(staged)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            f"The plugin manager refuses to start: The runtime {staged.generation.name} no "
            f"longer matches its seal ({path} differs): it will not run; rerun "
            "skulk-plugin-service setup to stage a fresh copy."
        ]
        assert not marker.exists(), f"{case}: code of the generation ran before the check"


def test_the_earlier_command_ran_tampered_code_before_its_check(staged: Staged) -> None:
    # What the bootstrap prevents: the command registered before it imports the manager
    # (the tampered code runs) and only then refuses. It is still a refusal.
    marker = staged.base / "marker"
    with _tampered_manager_code(staged):
        process = staged.serve(earlier=True)
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 2, output
        assert "skulk_host/plugin_manager/cli.py differs" in output
        assert marker.read_text() == "ran"
    marker.unlink()


def test_the_bootstrap_refuses_another_interpreter(staged: Staged) -> None:
    # The live environment's interpreter (the same base binary, another prefix).
    done = _bootstrap(staged, Path(sys.executable))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"The plugin manager refuses to start: {os.path.abspath(sys.executable)} is not the "
        f"interpreter of the runtime {staged.generation.name}: start the service with that "
        "runtime's bin/python."
    ]


def _fake_environment(base: Path, case: str) -> tuple[Path, Path, Any]:
    """A one-distribution environment that staging must refuse (nothing borrowed)."""
    prefix = base / "live"
    site = prefix / SITE
    info = site / "foo-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: foo\nVersion: 1.0\n")
    rows = ["foo-1.0.dist-info/METADATA,,", "foo-1.0.dist-info/RECORD,,"]
    match case:
        case "editable":
            (info / "direct_url.json").write_text(
                json.dumps({"url": "file:///src/foo", "dir_info": {"editable": True}})
            )
            rows.append("foo-1.0.dist-info/direct_url.json,,")
        case "outside":
            rows.append("../../../../../outside.txt,,")
        case "link":
            (site / "foo.py").symlink_to(REPO_ROOT / "README.md")
            rows.append("foo.py,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return prefix, site, importlib.metadata.PathDistribution(info)


@pytest.mark.parametrize(
    ("case", "sentence"),
    [
        ("editable", "is an editable install"),
        ("outside", "outside this environment"),
        ("link", "is a link"),
    ],
)
def test_staging_refuses_what_it_would_have_to_borrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, sentence: str
) -> None:
    prefix, site, dist = _fake_environment(tmp_path, case)
    monkeypatch.setattr(staging.importlib.metadata, "distributions", lambda: [dist])
    copier = staging._Copier(tmp_path / "generation", prefix)
    with pytest.raises(PluginRefusal) as refused:
        staging._copy_distributions(copier, site)
    assert sentence in refused.value.message
    assert refused.value.reason == "source_invalid"


FAKE_SYSTEMCTL = """#!/bin/sh
# systemctl for this test: a running system manager (nothing is registered with it).
echo "$*" >> "{calls}"
[ "$1" = is-system-running ] && echo running
"""


def test_the_registered_command_runs_the_selected_generation(staged: Staged) -> None:
    # systemd runs here (a stand-in), but this module's service root is a temporary one:
    # setup registers only the durable root, so it says why and registers nothing. The
    # command the fixed unit would run is then started as systemd would start it.
    fake = staged.base / "fake-systemd"
    fake.mkdir()
    systemctl = fake / "systemctl"
    systemctl.write_text(FAKE_SYSTEMCTL.format(calls=fake / "calls"))
    systemctl.chmod(0o700)
    env = {**staged.env, "PATH": f"{fake}{os.pathsep}{staged.env.get('PATH', '')}"}
    runner = Staged(staged.base, env, staged.summary, staged.seconds, staged.setup_python)
    done = runner.cli("setup")
    summary = _summary(done)
    assert (summary["phase"], summary["service"]) == ("selected", "none"), done.stdout
    assert "is not the durable system service root" in done.stdout
    assert (fake / "calls").read_text().splitlines() == ["is-system-running"]
    unit = system_helper.systemd_unit(os.getuid(), staged.root, tls=False)
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    command = exec_start.removeprefix("ExecStart=").split(" ")
    assert command == [
        str(staged.python),
        "-I",
        "-S",
        "-B",
        str(staged.root / "runtimes" / "current" / "bootstrap.py"),
        "serve",
        "--root",
        str(staged.root / "manager"),
        "--sealed-runtime",
    ]
    with (staged.base / "service.log").open("a") as log:
        service = subprocess.Popen(
            command, cwd=staged.root, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_until_answering(staged.root / "manager", service, staged.base / "service.log")
        status = json.loads(runner.cli("status").stdout)
        assert status["running_generation"] == summary["generation"] == selected(staged.root)
        assert status["registered_runtime_verified"] and status["management_available"]
    finally:
        service.terminate()
        service.wait(timeout=60)
