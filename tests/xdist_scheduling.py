"""How ``pytest -n`` shares the suite between workers: whole modules and named groups,
the longest first.

Most modules share one daemon, app or model per module, so a module split between two
workers would start it twice; xdist's ``loadgroup`` keeps ``xdist_group`` marks together
but schedules every other test on its own. Here a work unit is the test's group when it
has one (``@pytest.mark.xdist_group("name")``; ``--dist loadgroup`` puts the name after
an ``@`` in the node id), else its module.

The groups: ``plugin_runtime`` (the modules sharing the session's staged manager
runtime, staged once on one worker), ``network`` (network namespaces on fixed private
addresses and mDNS on loopback's shared 5353), ``runner_netns`` (RPC pools and MLX
rings, whose runners move into private namespaces and whose tests read what listens
there: heavy, one at a time, but nothing shared with ``network``) and ``timing`` (tests
that bound how long something takes: never two of them at once).

Order: xdist hands units out in its queue's order, by test count, so a unit of a few
long tests (a cluster module, the schemathesis run) could start last and keep one worker
busy long after the other ran dry. Here the queue runs longest first (LPT), each unit
weighed by what it took last time: the controller sums each unit's test durations
(setup, call and teardown) and keeps them in pytest's cache (``.pytest_cache``) at the
end of the run. Without a cache (a fresh checkout, CI) :data:`SECONDS` weighs the units
measured for #35, and any other unit weighs its test count.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Final

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

CACHE_KEY: Final = "skulk/xdist-unit-seconds"
"""The cache entry: ``{unit: [seconds, tests]}`` of every unit that ran to its end."""

UNLISTED_SECONDS_PER_TEST: Final = 0.25
"""What a unit with no measurement weighs per test (most modules are pure and quick)."""

SECONDS: Final[dict[str, float]] = {
    # Groups: the sums of their modules' seconds in the full run of 2026-12-06 (-n 2),
    # less what #35 item 5 took out since (a LAN cluster, two plugin runtime stagings;
    # the plugin runtime group staging a lean environment: about half its wall time;
    # 2026-12-06 evening: the LAN heal test on the shared LAN cluster, the sealed
    # manager importing its own package).
    "timing": 190,
    "network": 240,  # + the four fixed-address LAN modules (~40 s alone, 2026-12-06)
    "runner_netns": 170,
    "plugin_runtime": 95,
    "browser": 270,
    "images": 30,
    # Modules measured (tests/daemon on 2 cores shared ~4x, scaled to a quiet machine;
    # scaled again by the CPU their runners saved on one compute thread, 2026-12-06).
    "tests/daemon/test_cluster.py": 95,
    "tests/daemon/test_cluster_routing.py": 77,
    "tests/daemon/test_on_demand.py": 95,
    "tests/daemon/test_node_restart.py": 85,
    "tests/daemon/test_node_process.py": 85,
    "tests/daemon/test_extensions_chat.py": 32,
    "tests/daemon/test_cli_model_lifecycle.py": 56,
    "tests/daemon/test_cli_against_daemon.py": 60,
    "tests/daemon/test_node_logs.py": 59,
    "tests/daemon/test_steward.py": 38,
    "tests/daemon/test_capabilities_cluster.py": 48,
    "tests/daemon/test_on_demand_cluster.py": 38,
    "tests/daemon/test_cli_formats_against_daemon.py": 23,
    "tests/daemon/test_replica_routing.py": 25,
    "tests/daemon/test_cluster_capacity.py": 35,
    "tests/daemon/test_completions_daemon.py": 20,
    # The slowest items of the last quiet full run (closing note of the previous session).
    "tests/api/test_openapi_contract.py": 60,
    "tests/engines/test_mlx_serving.py": 60,
    "tests/registry/test_daemon.py": 53,
    # Few items, long ones: strict mypy over the whole tree (cold in CI), the import walk.
    "tests/test_quality_gates.py": 90,
    "tests/test_layering.py": 40,
}
"""Seconds per unit (every test's setup, call and teardown), for a run with no cache."""


GIB_PER_WORKER: Final = 3.0
"""Memory a worker may hold at its peak: a three-node cluster with the demo model, a
browser page, or a plugin runtime with its owner host (about 2 GiB measured, kept wide)."""


def worker_count(cpus: int, available_bytes: int | None) -> int:
    """How many workers ``-n auto`` starts: two more than the CPUs, as memory allows.

    Many tests wait on a daemon's start, an election or a product timer. With a worker a
    core, 2 cores sat idle 18 % of a run (19:02); a third worker kept them busy (idle
    4-6 %) while every test runner spun llama.cpp's threads on all cores. With one
    compute thread a runner (tests/daemon_process.py) the suite's processes reported
    1,242 CPU-s in a 16:14 run at three workers (64 % of two cores; an upper bound on
    the idle share, as runners outliving a killed daemon are not counted), and a
    fourth worker ran it in 12:39 with the cores 97 % busy (vmstat). Each
    worker may start daemons and runners, so memory bounds the count:
    :data:`GIB_PER_WORKER` each, never fewer than one.
    """
    wanted = max(cpus, 1) + 2
    if available_bytes is None:
        return wanted
    return max(1, min(wanted, int(available_bytes / (GIB_PER_WORKER * 2**30))))


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` in bytes, or None where the kernel does not say (not Linux)."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            return int(value.split()[0]) * 1024
    return None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as a container or taskset sets)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class ModuleOrGroupScheduling(LoadScopeScheduling):
    def __init__(self, config: pytest.Config, log: object | None = None) -> None:
        super().__init__(config, log)
        self.previous = previous_seconds(config)
        self.sizes: dict[str, int] = {}
        self.spent: Counter[str] = Counter()
        self.done: Counter[str] = Counter()

    def _split_scope(self, nodeid: str) -> str:
        # NOTE: an "@" inside a parametrize id ends before its "]"; only one after it
        # is the group xdist appended.
        if nodeid.rfind("@") > nodeid.rfind("]"):
            return nodeid.rsplit("@", maxsplit=1)[-1]
        return nodeid.split("::", 1)[0]

    def _assign_work_unit(self, node: WorkerController) -> None:
        # The base class fills the queue (by test count) before its first assignment.
        if not self.sizes:
            self.sizes = {scope: len(tests) for scope, tests in self.workqueue.items()}
            units = sorted(self.workqueue.items(), key=lambda unit: -self.weight(unit[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)

    def mark_test_complete(
        self, node: WorkerController, item_index: int, duration: float = 0
    ) -> None:
        scope = self._split_scope(self.registered_collections[node][item_index])
        self.spent[scope] += duration
        self.done[scope] += 1
        super().mark_test_complete(node, item_index, duration)

    def weight(self, scope: str) -> float:
        """A unit's expected seconds: last run's (scaled to its test count now), the
        table's, else by its test count."""
        tests = self.sizes.get(scope, 0)
        if scope in self.previous:
            seconds, then = self.previous[scope]
            return seconds * tests / max(then, 1)
        return SECONDS.get(scope, UNLISTED_SECONDS_PER_TEST * tests)

    def finished_units(self) -> dict[str, list[float]]:
        """``{unit: [seconds, tests]}`` of the units whose every test ran."""
        return {
            scope: [round(self.spent[scope], 2), size]
            for scope, size in self.sizes.items()
            if self.done[scope] == size
        }


def previous_seconds(config: pytest.Config) -> dict[str, tuple[float, int]]:
    cache = getattr(config, "cache", None)
    stored = cache.get(CACHE_KEY, {}) if cache is not None else {}
    found: dict[str, tuple[float, int]] = {}
    if isinstance(stored, dict):
        for scope, entry in stored.items():
            if isinstance(entry, list) and len(entry) == 2:
                found[str(scope)] = (float(entry[0]), int(entry[1]))
    return found


def remember(config: pytest.Config, scheduler: ModuleOrGroupScheduling) -> None:
    """Keep this run's unit durations in the cache for the next run's order."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return
    stored = cache.get(CACHE_KEY, {})
    merged = dict(stored) if isinstance(stored, dict) else {}
    merged.update(scheduler.finished_units())
    cache.set(CACHE_KEY, merged)
