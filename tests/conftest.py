from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import log_secrets
from tests.daemon.serving import place
from tests.daemon_process import DaemonFactory, DaemonProcess

if TYPE_CHECKING:
    from tests.xdist_scheduling import ModuleOrGroupScheduling

SCHEDULER: pytest.StashKey[ModuleOrGroupScheduling] = pytest.StashKey()
"""The controller's scheduler, under ``--dist loadgroup``."""


def pytest_configure(config: pytest.Config) -> None:
    """One bytecode cache for the run, where the environment forbids one beside the sources.

    With ``PYTHONDONTWRITEBYTECODE`` every process compiles every module it imports from
    source: each daemon, runner and CLI subprocess the suite starts (hundreds) pays
    seconds of CPU for it, and so does every xdist worker's collection. The cache goes
    under ``.pytest_cache`` (ignored by git), never beside a source, and is inherited by
    every subprocess (and xdist worker) started with this environment."""
    # Known without xdist too (``-p no:xdist``): see tests/xdist_scheduling.py.
    config.addinivalue_line("markers", "xdist_group(name): run on one worker with its group")
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = config.rootpath / ".pytest_cache" / "pycache"
    prefix.mkdir(parents=True, exist_ok=True)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default): a worker more than the CPUs, as memory allows
    (``tests/xdist_scheduling.py``)."""
    from tests.xdist_scheduling import (  # noqa: PLC0415 - xdist only
        available_memory,
        usable_cpus,
        worker_count,
    )

    return worker_count(usable_cpus(), available_memory())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadgroup`` workers take whole modules or ``xdist_group``s
    (``tests/xdist_scheduling.py``); another ``--dist`` keeps xdist's own."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.xdist_scheduling import ModuleOrGroupScheduling  # noqa: PLC0415 - xdist only

    scheduler = ModuleOrGroupScheduling(config, log)
    config.stash[SCHEDULER] = scheduler
    return scheduler


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker under ``--dist loadgroup``, refuse to run if xdist did not
    append an ``xdist_group`` to its tests' ids: the controller would then schedule the
    group's modules apart, and tests that must never share the machine (fixed network
    addresses, timing bounds, the one staged plugin runtime) would run at once. (pytest
    9.2 moved the node id that pytest-xdist 3.8 rewrites: it ignored every group.)"""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        nodeid = item.nodeid
        grouped = nodeid.rfind("@") > nodeid.rfind("]")  # as the scheduler reads it
        if item.get_closest_marker("xdist_group") is not None and not grouped:
            raise pytest.UsageError(
                f"{nodeid} is in an xdist_group but xdist did not mark it: this "
                "pytest/pytest-xdist pair ignores groups (see pyproject's pytest pin)"
            )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller keeps each unit's duration for the next run's order."""
    scheduler = session.config.stash.get(SCHEDULER, None)
    if scheduler is not None:
        from tests.xdist_scheduling import remember  # noqa: PLC0415 - xdist only

        remember(session.config, scheduler)


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_log() -> Iterator[None]:
    """Fails the run if a registered key, token or pairing secret reached a log."""
    sniffer = log_secrets.RecordSniffer()
    logging.getLogger().addHandler(sniffer)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(sniffer)
    found = log_secrets.findings()
    assert not found, "secrets in logs:\n" + "\n".join(found)


@pytest.fixture(scope="session")
def shared_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One models dir for the session: the demo model is assembled into it once."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def make_daemon(tmp_path: Path, shared_models_dir: Path) -> Iterator[DaemonFactory]:
    made: list[DaemonProcess] = []

    def factory(name: str = "node", **extra_env: str) -> DaemonProcess:
        daemon = DaemonProcess(
            root=tmp_path / name, models_dir=shared_models_dir, extra_env=dict(extra_env)
        )
        made.append(daemon)
        return daemon

    yield factory
    for daemon in made:
        daemon.kill()


@pytest.fixture
def daemon(make_daemon: DaemonFactory) -> DaemonProcess:
    return make_daemon().start()


@pytest.fixture(scope="session")
def demo_served(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, str]]:
    """One daemon serving the demo model, shared by the contract and security suites.

    Tests using it must leave it idle (no generation left running) when they end.
    """
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("demo-served"),
        models_dir=shared_models_dir,
    )
    daemon.start()
    try:
        yield daemon, place(daemon)
    finally:
        daemon.kill()
