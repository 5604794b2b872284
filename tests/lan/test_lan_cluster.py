"""Daemons on a LAN of network namespaces (one stack each, default ports, mDNS, no
``--peer``): they settle on one master and stay settled, fail over when the master dies
(and the dead one, restarted with its identity, follows the new master), heal a
partition without losing what either side changed, settle once a flapping link stops,
and stop in bounded time when their network vanished.

One three-node cluster (the last simultaneous start watched) serves every test after
the first: each leaves it three converged nodes, but the last.

``SKULK_LAN_REPEATS`` (default 3) is how many times the simultaneous start is tried,
``SKULK_LAN_SIZES`` (default ``3``, e.g. ``3,5``) the cluster sizes it is tried with,
``SKULK_LAN_KILLS`` (default 2) how many master kills the failover test measures,
``SKULK_LAN_FLAPS`` (default 2) how many times the flapping link goes down and up.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import custom_card
from tests.daemon_process import HTTP
from tests.lan.daemons import LanDaemon, lan_cluster
from tests.lan.netns import Lan, Machine

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]

REPEATS = int(os.environ.get("SKULK_LAN_REPEATS", "3"))
SIZES = [int(size) for size in os.environ.get("SKULK_LAN_SIZES", "3").split(",")]
KILLS = int(os.environ.get("SKULK_LAN_KILLS", "2"))
FLAPS = int(os.environ.get("SKULK_LAN_FLAPS", "2"))
CONVERGE_SECONDS = 60.0
WATCH_SECONDS = 10.0
REJOIN_WATCH_SECONDS = 2.0
FLAP_SECONDS = 2.5
"""Down (and then up) this long: past a follower's master timeout, under the 4 s
after which its peers would drop it."""
POLL_SECONDS = 0.5
"""Between two looks at every node while waiting for (or watching) an agreement: each
look is a request to each daemon, CPU it spends answering on a machine it shares.
The failover's new master is looked for more often: that wait is what it measures."""
FAILOVER_BOUND_SECONDS = 10.0
STOP_BOUND_SECONDS = 30.0
"""Far under the daemon's own 60 s stop deadline: a normal stop is much faster."""


def state(daemon: LanDaemon) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = HTTP.get(f"{daemon.url}/state", timeout=2.0).json()
    except httpx.HTTPError:
        return None
    return body


def agreed(daemons: list[LanDaemon], members: int) -> tuple[str, int] | None:
    """(master, term) when every daemon reports the same ones and ``members`` nodes."""
    views = [state(daemon) for daemon in daemons]
    seen = set()
    for view in views:
        if view is None or view.get("masterNodeId") is None:
            return None
        if len(view["topology"]["nodes"]) != members:
            return None
        seen.add((view["masterNodeId"], view["electionTerm"]))
    if len(seen) != 1:
        return None
    master, term = seen.pop()
    # Each node's election agrees too (not only the replicated State it last applied).
    if any(fabric_master(daemon) != master for daemon in daemons):
        return None
    return str(master), int(term)


def fabric_master(daemon: LanDaemon) -> str | None:
    try:
        cluster = HTTP.get(f"{daemon.url}/v1/diagnostics/node", timeout=2.0).json()["cluster"]
    except httpx.HTTPError:
        return None
    master: str | None = cluster["master"]
    return master


def converge(
    daemons: list[LanDaemon], members: int, timeout: float = CONVERGE_SECONDS
) -> tuple[str, int]:
    deadline = time.monotonic() + timeout
    while (found := agreed(daemons, members)) is None:
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out waiting for {members} nodes to agree\n{election_log(daemons)}"
            )
        time.sleep(POLL_SECONDS)
    return found


def election_log(daemons: list[LanDaemon]) -> str:
    """Each daemon's election lines, for a failure message."""
    lines = []
    for i, daemon in enumerate(daemons):
        for line in daemon.log_text().splitlines():
            if "election:" in line or "session:" in line or "stopping" in line:
                lines.append(f"node{i} {line}")
    return "\n".join(lines[-200:])


def hold(daemons: list[LanDaemon], seconds: float) -> set[tuple[str, int]]:
    """Every (master, term) the daemons report over ``seconds`` (one when settled)."""
    seen: set[tuple[str, int]] = set()
    deadline = time.monotonic() + seconds
    while True:
        for daemon in daemons:
            view = state(daemon)
            assert view is not None, f"a node stopped answering\n{election_log(daemons)}"
            seen.add((view["masterNodeId"], view["electionTerm"]))
        if time.monotonic() >= deadline:
            return seen
        time.sleep(POLL_SECONDS)


def new_master(survivors: list[LanDaemon], old: str) -> bool:
    """Whether the survivors all follow one master, and not ``old``."""
    masters = {view["masterNodeId"] if view else None for view in map(state, survivors)}
    return len(masters) == 1 and None not in masters and old not in masters


def node_id(daemon: LanDaemon) -> str:
    value: str = daemon.get("/node_id").json()
    return value


@pytest.fixture(scope="module")
def shared(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[Lan, list[LanDaemon]]]:
    """Three machines started at the same moment, for the tests below, which each leave
    them three converged nodes (the last one excepted: it takes one away). Its start is
    the last simultaneous start of three the first test watches."""
    with lan_cluster(tmp_path_factory.mktemp("lan"), shared_models_dir, 3) as cluster:
        yield cluster


def _settles(daemons: list[LanDaemon], size: int, attempt: int) -> None:
    master, term = converge(daemons, size)
    # No faults: the master and its term hold (a flap shows as a term change).
    seen = hold(daemons, WATCH_SECONDS)
    print(f"start {attempt} of {size}: master {master[-6:]} term {term}, seen {len(seen)}")
    assert seen == {(master, term)}, f"flap: {seen}\n{election_log(daemons)}"


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("attempt", range(REPEATS))
def test_a_simultaneous_start_settles_and_stays_settled(
    tmp_path: Path, shared_models_dir: Path, size: int, attempt: int, request: pytest.FixtureRequest
) -> None:
    if (attempt, size) == (REPEATS - 1, 3) and size == SIZES[-1]:
        # The last start watched is the module's cluster, started now for the tests
        # below (one cluster start fewer). Never an earlier one: a LAN's names are the
        # test process's, so no other LAN may be set up while the module's is up.
        _, daemons = request.getfixturevalue("shared")
        _settles(daemons, size, attempt)
        return
    with lan_cluster(tmp_path, shared_models_dir, size) as (_, daemons):
        _settles(daemons, size, attempt)


def test_the_master_killed_survivors_elect_a_new_one(
    shared: tuple[Lan, list[LanDaemon]],
) -> None:
    _, daemons = shared
    times = []
    for _ in range(KILLS):
        master, term = converge(daemons, 3)
        victim = next(d for d in daemons if node_id(d) == master)
        survivors = [d for d in daemons if d is not victim]
        assert victim.process is not None
        victim.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        victim.process.wait(timeout=10)
        wait_for(partial(new_master, survivors, master), "a new master", timeout=30)
        took = time.monotonic() - killed
        times.append(took)
        print(f"failover after killing {master[-6:]} (term {term}): {took:.2f} s")
        assert took < FAILOVER_BOUND_SECONDS, election_log(daemons)
        # The dead master's peers drop it; it comes back with the same identity and
        # joins the new master.
        new, new_term = converge(survivors, 2, timeout=30)
        assert new != master and new_term > term
        # Rejoining, it follows the sitting master and leaves its term alone.
        victim.start()
        assert node_id(victim) == master
        assert converge(daemons, 3) == (new, new_term), election_log(daemons)
        assert hold(daemons, REJOIN_WATCH_SECONDS) == {(new, new_term)}, election_log(daemons)
    median = statistics.median(times)
    print(f"failover seconds: {[round(t, 2) for t in times]}, median {median:.2f}")


def test_a_partitioned_node_rejoins_after_the_heal(
    shared: tuple[Lan, list[LanDaemon]],
) -> None:
    net, daemons = shared
    master, term = converge(daemons, 3)
    # Cut the master off: the two others elect a new one; the lone node is its own.
    index = next(i for i, d in enumerate(daemons) if node_id(d) == master)
    lone, rest = daemons[index], [d for d in daemons if d is not daemons[index]]
    machine = net.machines[index]
    machine.disconnect()
    try:
        majority, majority_term = converge(rest, 2, timeout=30)
        assert majority != master and majority_term > term
        print(f"partition: majority master {majority[-6:]} term {majority_term}")
    finally:
        machine.reconnect()
    healed = time.monotonic()
    final, final_term = converge(daemons, 3)
    print(f"heal: one master {final[-6:]} term {final_term} in {time.monotonic() - healed:.2f} s")
    assert lone.process is not None and lone.process.poll() is None


_CALL = """
import json, sys, httpx
method, path, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
r = httpx.request(method, "http://127.0.0.1:52415" + path, json=body, timeout=30)
print(json.dumps({"status": r.status_code, "body": r.json()}))
"""


def on_machine(machine: Machine, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """A request from the machine itself (its loopback): what the owner may do."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            machine.namespace,
            sys.executable,
            "-c",
            _CALL,
            method,
            path,
            json.dumps(body),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def cards(daemon: LanDaemon) -> set[str]:
    view = state(daemon)
    return set() if view is None else set(view.get("customModelCards", {}))


def recoveries(daemon: LanDaemon) -> list[tuple[str, str]]:
    """What the node resubmitted after healed partitions: (change, outcome), oldest first."""
    body = daemon.get("/v1/diagnostics/node").json()["partitionRecoveries"]
    return [(r["change"], r["outcome"]) for r in body]


def test_changes_on_both_sides_of_a_partition_survive_the_heal(
    shared: tuple[Lan, list[LanDaemon]],
) -> None:
    """The master is cut off and both sides change State (each adds a custom card,
    through its own machine's loopback as an operator would). On the heal the side
    with the newer term wins and the other installs its snapshot; the losing side's
    change is submitted again by the node that made it, so every node ends with both
    cards, and the losing node's diagnostics say what it resubmitted."""
    net, daemons = shared
    master, term = converge(daemons, 3)
    index = next(i for i, d in enumerate(daemons) if node_id(d) == master)
    lone, lone_machine = daemons[index], net.machines[index]
    rest = [d for d in daemons if d is not lone]
    rest_machine = net.machines[daemons.index(rest[0])]
    # The cluster has been through other partitions: only what this one adds counts.
    earlier, log_offset = len(recoveries(lone)), len(lone.log_text())
    lone_machine.disconnect()
    try:
        _, majority_term = converge(rest, 2, timeout=30)
        assert majority_term > term
        # Each side changes State: the lone node is still master of its own side.
        made = on_machine(
            lone_machine, "POST", "/models/add-card", {"model_card": custom_card("test/lone-side")}
        )
        assert made["status"] in (200, 201), made
        made = on_machine(
            rest_machine,
            "POST",
            "/models/add-card",
            {"model_card": custom_card("test/majority-side")},
        )
        assert made["status"] in (200, 201), made
    finally:
        lone_machine.reconnect()
    converge(daemons, 3)
    both = {"test/lone-side", "test/majority-side"}
    try:
        wait_for(lambda: all(cards(d) >= both for d in daemons), "both cards everywhere", 30)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: {[sorted(cards(d)) for d in daemons]}\n{election_log(daemons)}"
        ) from None
    assert recoveries(lone)[earlier:] == [("custom card for test/lone-side", "applied")]
    assert "submitting them again" in lone.log_text()[log_offset:]


def test_a_flapping_link_settles_once_it_stops(shared: tuple[Lan, list[LanDaemon]]) -> None:
    net, daemons = shared
    master, term = converge(daemons, 3)
    index = next(i for i, d in enumerate(daemons) if node_id(d) != master)
    machine = net.machines[index]
    try:
        for _ in range(FLAPS):
            machine.disconnect()
            time.sleep(FLAP_SECONDS)
            machine.reconnect()
            time.sleep(FLAP_SECONDS)
    finally:
        machine.reconnect()
    final, final_term = converge(daemons, 3)
    settled = hold(daemons, REJOIN_WATCH_SECONDS)
    print(
        f"link flapped {FLAPS}x: master {master[-6:]} term {term} -> {final[-6:]} term {final_term}"
    )
    assert settled == {(final, final_term)}, election_log(daemons)


def test_sigterm_during_a_flap_stops_in_bounded_time(
    shared: tuple[Lan, list[LanDaemon]],
) -> None:
    net, daemons = shared
    master, _ = converge(daemons, 3)
    # The master's link flaps; it is told to stop while cut off, mid-election.
    index = next(i for i, d in enumerate(daemons) if node_id(d) == master)
    victim, machine = daemons[index], net.machines[index]
    machine.disconnect()
    time.sleep(FLAP_SECONDS)
    machine.reconnect()
    time.sleep(0.5)
    machine.disconnect()
    assert victim.process is not None
    process = victim.process
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    try:
        code = process.wait(timeout=STOP_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running:\n{victim.log_text()[-4000:]}") from None
    finally:
        machine.reconnect()
    took = time.monotonic() - sent
    victim.process = None
    print(f"SIGTERM during a flap: exit {code} in {took:.2f} s")
    assert code == 0, victim.log_text()[-4000:]
    # It comes back with its identity, and the three settle again.
    victim.start()
    converge(daemons, 3)


def test_sigterm_after_the_network_vanished_stops_in_bounded_time(
    shared: tuple[Lan, list[LanDaemon]],
) -> None:
    net, daemons = shared
    master, _ = converge(daemons, 3)
    # The master (the worst case: it had followers and a session) loses its card.
    index = next(i for i, d in enumerate(daemons) if node_id(d) == master)
    victim = daemons[index]
    net.machines[index].unplug()
    # Long enough for its peers to vanish (peer timeout 4 s) and the node to notice.
    time.sleep(5.0)
    assert victim.process is not None
    process = victim.process
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    try:
        code = process.wait(timeout=STOP_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running:\n{victim.log_text()[-4000:]}") from None
    took = time.monotonic() - sent
    victim.process = None
    print(f"SIGTERM after the network vanished: exit {code} in {took:.2f} s")
    assert code == 0, victim.log_text()[-4000:]
