"""mDNS discovery with real zeroconf responders.

On loopback where this machine loops multicast back, and in a private network
namespace (two processes) where unprivileged namespaces are allowed; each test
that needs one of those skips with the reason detected when it does not work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from skulk_daemon.fabric.discovery import (
    ADDRESSES_MAX,
    MAX_RESOLVING,
    NODE_ID_MAX_LENGTH,
    REJECTIONS_MAX,
    SERVICE_TYPE,
    VERSION_MAX_LENGTH,
    DiscoveredPeer,
    MdnsDiscovery,
    instance_label,
    parse_announcement,
)
from tests.daemon.fabric_probe import loopback_mdns_problem

pytestmark = pytest.mark.xdist_group("network")

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
# How long a test waits for an announcement before failing: a give-up bound, not
# a timing claim (discovery on loopback takes about a second of name probing).
DEADLINE_S = 15.0
ADDRESS = [LOOPBACK]


def _node_id() -> str:
    return f"12D3KooW{uuid.uuid4().hex}"


def _require_loopback_mdns() -> None:
    problem = loopback_mdns_problem()
    if problem is not None:
        pytest.skip(f"loopback multicast unusable here: {problem}")


def _other_tasks() -> list[asyncio.Task[object]]:
    current = asyncio.current_task()
    return [task for task in asyncio.all_tasks() if task is not current]


class Reports:
    """An ``on_peer`` handler that records every report, in order."""

    def __init__(self) -> None:
        self.peers: list[DiscoveredPeer] = []

    def __call__(self, peer: DiscoveredPeer) -> None:
        self.peers.append(peer)

    async def first(self, what: str, match: Callable[[DiscoveredPeer], bool]) -> DiscoveredPeer:
        found: list[DiscoveredPeer] = []

        def seen() -> bool:
            found[:] = [peer for peer in self.peers if match(peer)]
            return bool(found)

        await _until(seen, f"{what} (reports so far: {self.peers})")
        return found[0]


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S} s: {what}")
        await asyncio.sleep(0.05)


def _discovery(node_id: str, port: int, reports: Reports, version: str = "0.1.0") -> MdnsDiscovery:
    return MdnsDiscovery(
        node_id=node_id,
        fabric_port=port,
        version=version,
        on_peer=reports,
        interfaces=[LOOPBACK],
    )


def _raw_info(label: str, properties: dict[str, str], port: int = 40000) -> AsyncServiceInfo:
    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{label}.{SERVICE_TYPE}",
        port=port,
        properties=properties,
        server=f"{label}.local.",
        parsed_addresses=[LOOPBACK],
    )


# --- two nodes -------------------------------------------------------------


def test_two_nodes_on_loopback_find_each_other_and_never_themselves() -> None:
    _require_loopback_mdns()

    async def scenario() -> None:
        a_id, b_id = _node_id(), _node_id()
        a_reports, b_reports = Reports(), Reports()
        a = _discovery(a_id, 41001, a_reports, version="0.1.0")
        b = _discovery(b_id, 41002, b_reports, version="0.2.0")
        try:
            await asyncio.gather(a.start(), b.start())
            assert a.available, a.unavailable_reason
            assert b.available, b.unavailable_reason
            assert a.service_name == f"skulk-{a_id[-12:]}.{SERVICE_TYPE}"

            b_seen = await a_reports.first("a seeing b", lambda p: p.node_id == b_id)
            a_seen = await b_reports.first("b seeing a", lambda p: p.node_id == a_id)
            assert b_seen == DiscoveredPeer(b_id, (LOOPBACK,), 41002, "0.2.0")
            assert a_seen == DiscoveredPeer(a_id, (LOOPBACK,), 41001, "0.1.0")
            assert a_id not in {peer.node_id for peer in a_reports.peers}
            assert b_id not in {peer.node_id for peer in b_reports.peers}
            # Re-announcements of an unchanged peer are not reported again.
            assert [p.node_id for p in a_reports.peers].count(b_id) == 1
        finally:
            await asyncio.gather(a.close(), b.close())
        assert not a.available
        assert a.unavailable_reason == "closed"
        assert _other_tasks() == []

    asyncio.run(scenario())


def test_a_restarted_peer_on_a_new_port_is_reported_again() -> None:
    _require_loopback_mdns()

    async def scenario() -> None:
        a_reports, b_reports = Reports(), Reports()
        a = _discovery(_node_id(), 41011, a_reports)
        b_id = _node_id()
        b = _discovery(b_id, 41012, b_reports)
        try:
            await asyncio.gather(a.start(), b.start())
            await a_reports.first("b on its first port", lambda p: p.node_id == b_id)
            await b.close()
            b = _discovery(b_id, 41013, b_reports)
            await b.start()
            moved = await a_reports.first(
                "b on its new port", lambda p: p.node_id == b_id and p.port == 41013
            )
            assert moved.addresses == (LOOPBACK,)
        finally:
            await asyncio.gather(a.close(), b.close())
        assert _other_tasks() == []

    asyncio.run(scenario())


def test_an_updated_announcement_without_goodbye_is_reported_again() -> None:
    """A peer whose records change in place (no goodbye first) is reported anew."""
    _require_loopback_mdns()

    async def scenario() -> None:
        reports = Reports()
        observer = _discovery(_node_id(), 41021, reports)
        peer_id = _node_id()
        label = f"skulk-raw{uuid.uuid4().hex[:8]}"
        raw = AsyncZeroconf(interfaces=ADDRESS)
        try:
            await observer.start()
            first = _raw_info(label, {"node_id": peer_id, "port": "41022"}, port=41022)
            await (await raw.async_register_service(first))
            await reports.first("the raw peer", lambda p: p.node_id == peer_id)
            moved = _raw_info(label, {"node_id": peer_id, "port": "41023"}, port=41023)
            await (await raw.async_update_service(moved))
            await reports.first(
                "the raw peer on its new port", lambda p: p.node_id == peer_id and p.port == 41023
            )
            assert [p.port for p in reports.peers if p.node_id == peer_id] == [41022, 41023]
        finally:
            await observer.close()
            await raw.async_close()
        assert _other_tasks() == []

    asyncio.run(scenario())


def test_malformed_announcements_are_ignored_and_counted() -> None:
    _require_loopback_mdns()

    async def scenario() -> None:
        reports = Reports()
        observer = _discovery(_node_id(), 41031, reports)
        tag = uuid.uuid4().hex[:8]
        good_id = _node_id()
        bad_ids = {
            "nonodeid": {"port": "41032"},
            "portzero": {"node_id": _node_id(), "port": "0"},
            "porthigh": {"node_id": _node_id(), "port": "65536"},
            "portword": {"node_id": _node_id(), "port": "http"},
            "spacedid": {"node_id": "12D3KooW has spaces", "port": "41032"},
            "longid": {"node_id": "x" * (NODE_ID_MAX_LENGTH + 1), "port": "41032"},
        }
        infos = [_raw_info(f"bad-{kind}-{tag}", txt) for kind, txt in bad_ids.items()]
        infos.append(_raw_info(f"good-{tag}", {"node_id": good_id, "port": "41033"}, 41033))
        raw = AsyncZeroconf(interfaces=ADDRESS)
        try:
            await observer.start()
            announced = await asyncio.gather(*(raw.async_register_service(i) for i in infos))
            await asyncio.gather(*announced)
            bad_names = {info.name for info in infos[:-1]}
            await reports.first("the well-formed raw peer", lambda p: p.node_id == good_id)
            await _until(
                lambda: bad_names <= observer.rejections.keys(),
                f"every malformed service rejected (so far {observer.rejections})",
            )
        finally:
            await observer.close()
            await raw.async_close()
        assert observer.malformed_count >= len(bad_ids)
        reasons = observer.rejections
        assert "node_id is missing" in reasons[f"bad-nonodeid-{tag}.{SERVICE_TYPE}"]
        assert "outside 1..65535" in reasons[f"bad-portzero-{tag}.{SERVICE_TYPE}"]
        assert "outside 1..65535" in reasons[f"bad-porthigh-{tag}.{SERVICE_TYPE}"]
        assert "not a number" in reasons[f"bad-portword-{tag}.{SERVICE_TYPE}"]
        assert "not printable" in reasons[f"bad-spacedid-{tag}.{SERVICE_TYPE}"]
        assert "over 128" in reasons[f"bad-longid-{tag}.{SERVICE_TYPE}"]
        reported_ids = {peer.node_id for peer in reports.peers}
        bad_node_ids = {txt.get("node_id") for txt in bad_ids.values()}
        assert not reported_ids & bad_node_ids
        assert good_id in reported_ids
        assert bad_names.isdisjoint(observer.peers)

    asyncio.run(scenario())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_burst_of_more_peers_than_resolve_at_once_is_reported_whole(loop: str) -> None:
    """Peers announced together, more than ``MAX_RESOLVING``: each waits its turn
    and every one is reported. uvloop reads many datagrams a wake-up, so the whole
    burst arrives before any resolution ends (a real peer used to be dropped for
    good then: the browser reports a service once)."""
    _require_loopback_mdns()
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if loop == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop
    count = 2 * MAX_RESOLVING + 8

    async def scenario() -> None:
        reports = Reports()
        observer = _discovery(_node_id(), 41051, reports)
        tag = uuid.uuid4().hex[:8]
        ids = [_node_id() for _ in range(count)]
        infos = [
            _raw_info(f"burst{i}-{tag}", {"node_id": node_id, "port": str(42000 + i)}, 42000 + i)
            for i, node_id in enumerate(ids)
        ]
        raw = AsyncZeroconf(interfaces=ADDRESS)
        try:
            await observer.start()
            announced = await asyncio.gather(*(raw.async_register_service(i) for i in infos))
            await asyncio.gather(*announced)
            await _until(
                lambda: set(ids) <= {peer.node_id for peer in reports.peers},
                f"all {count} peers reported (so far {len(reports.peers)})",
            )
        finally:
            await observer.close()
            await raw.async_close()
        assert observer.ignored_count == 0

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(scenario())


# --- degradation -----------------------------------------------------------


def test_an_address_not_on_this_machine_degrades_instead_of_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 203.0.113.0/24 is TEST-NET-3: documentation only, never assigned.
    absent = "203.0.113.77"

    async def scenario() -> MdnsDiscovery:
        discovery = MdnsDiscovery(
            node_id=_node_id(),
            fabric_port=41041,
            version="0.1.0",
            on_peer=Reports(),
            interfaces=[absent],
        )
        assert not discovery.available
        assert discovery.unavailable_reason == "not started"
        await discovery.start()
        assert not discovery.available
        reason = discovery.unavailable_reason
        assert reason is not None
        assert absent in reason
        assert "not an address of any interface" in reason
        await discovery.close()
        await discovery.close()  # idempotent
        assert _other_tasks() == []
        return discovery

    with caplog.at_level(logging.WARNING, logger="skulk_daemon.fabric.discovery"):
        asyncio.run(scenario())
    assert any(
        "mDNS discovery unavailable" in r.getMessage() and absent in r.getMessage()
        for r in caplog.records
    )


def test_rejection_reasons_are_bounded_but_every_one_is_counted() -> None:
    discovery = _discovery(_node_id(), 41045, Reports())
    for i in range(REJECTIONS_MAX + 1):
        discovery._reject(f"bad-{i}.{SERVICE_TYPE}", "TXT node_id is missing")
    discovery._reject(f"bad-1.{SERVICE_TYPE}", "TXT node_id is missing")  # seen: not recounted
    rejections = discovery.rejections
    assert len(rejections) == REJECTIONS_MAX
    assert f"bad-0.{SERVICE_TYPE}" not in rejections
    assert f"bad-{REJECTIONS_MAX}.{SERVICE_TYPE}" in rejections
    assert discovery.malformed_count == REJECTIONS_MAX + 1


def test_close_without_start_is_harmless() -> None:
    async def scenario() -> None:
        discovery = _discovery(_node_id(), 41051, Reports())
        await discovery.close()
        assert discovery.unavailable_reason == "closed"

    asyncio.run(scenario())


def test_our_own_announcement_is_validated_up_front() -> None:
    def make(**overrides: object) -> MdnsDiscovery:
        arguments: dict[str, object] = {
            "node_id": _node_id(),
            "fabric_port": 41061,
            "version": "0.1.0",
            "on_peer": Reports(),
        }
        arguments.update(overrides)
        return MdnsDiscovery(**arguments)  # type: ignore[arg-type]

    with pytest.raises(ValueError, match=r"outside 1\.\.65535"):
        make(fabric_port=0)
    with pytest.raises(ValueError, match="not printable"):
        make(node_id="has space")
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        make(interfaces=["lo"])


# --- the pure parser, at its bounds ----------------------------------------


def _txt(**values: str | None) -> dict[bytes, bytes | None]:
    return {k.encode(): None if v is None else v.encode() for k, v in values.items()}


def test_parse_announcement_accepts_the_bounds() -> None:
    node_id = "n" * NODE_ID_MAX_LENGTH
    peer = parse_announcement(
        _txt(node_id=node_id, port="1", version="v" * VERSION_MAX_LENGTH),
        ["fd00::2", LOOPBACK, "fe80::1%eth0"],
    )
    assert peer == DiscoveredPeer(
        node_id, (LOOPBACK, "fd00::2", "fe80::1%eth0"), 1, "v" * VERSION_MAX_LENGTH
    )
    assert parse_announcement(_txt(node_id="a", port="65535"), [LOOPBACK]).port == 65535
    assert parse_announcement(_txt(node_id="a", port="80"), [LOOPBACK]).version == ""


@pytest.mark.parametrize(
    ("txt", "reason"),
    [
        (_txt(port="80"), "node_id is missing"),
        (_txt(node_id=None, port="80"), "node_id has no value"),
        (_txt(node_id="", port="80"), "empty or not printable"),
        (_txt(node_id="n" * (NODE_ID_MAX_LENGTH + 1), port="80"), "over 128"),
        (_txt(node_id="tab\there", port="80"), "not printable"),
        (_txt(node_id="nodé", port="80"), "not ASCII"),
        (_txt(node_id="a"), "port is missing"),
        (_txt(node_id="a", port="0"), "outside 1..65535"),
        (_txt(node_id="a", port="65536"), "outside 1..65535"),
        (_txt(node_id="a", port="-1"), "not a number"),
        (_txt(node_id="a", port="+80"), "not a number"),
        (_txt(node_id="a", port="800000"), "over 5"),
        (_txt(node_id="a", port="80", version="v" * (VERSION_MAX_LENGTH + 1)), "over 64"),
    ],
)
def test_parse_announcement_refuses(txt: dict[bytes, bytes | None], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_announcement(txt, [LOOPBACK])


def test_parse_announcement_needs_a_usable_address_and_bounds_them() -> None:
    with pytest.raises(ValueError, match="no usable address"):
        parse_announcement(_txt(node_id="a", port="80"), [])
    with pytest.raises(ValueError, match="no usable address"):
        parse_announcement(_txt(node_id="a", port="80"), ["0.0.0.0", "224.0.0.251", "junk"])
    many = [f"10.0.0.{i}" for i in range(1, ADDRESSES_MAX + 5)]
    peer = parse_announcement(_txt(node_id="a", port="80"), [*many, *many])
    assert peer.addresses == tuple(many[:ADDRESSES_MAX])


def test_instance_label_is_a_dns_label_from_the_node_id_tail() -> None:
    assert instance_label("12D3KooWAbCdEfGhIjKlMnOp") == "skulk-EfGhIjKlMnOp"
    assert instance_label("a.b_c") == "skulk-abc"
    assert instance_label("...").startswith("skulk-")
    assert len(instance_label("...")) == len("skulk-") + 12


# --- two processes in a private network namespace --------------------------

_NODE_SCRIPT = """
import asyncio, json, pathlib, sys, time
from zeroconf import InterfaceChoice
from skulk_daemon.fabric.discovery import MdnsDiscovery

node_id, port, peer_id, out_dir, deadline, interfaces = sys.argv[1:7]
out = pathlib.Path(out_dir)

async def main():
    found = asyncio.get_running_loop().create_future()
    reports = []
    def on_peer(peer):
        reports.append(peer.node_id)
        if peer.node_id == peer_id and not found.done():
            found.set_result(peer)
    choice = InterfaceChoice.All if interfaces == "all" else [interfaces]
    discovery = MdnsDiscovery(node_id=node_id, fabric_port=int(port), version="ns",
                              on_peer=on_peer, interfaces=choice)
    await discovery.start()
    try:
        if not discovery.available:
            result = {"error": discovery.unavailable_reason}
        else:
            peer = await asyncio.wait_for(found, float(deadline))
            result = {"node_id": peer.node_id, "port": peer.port,
                      "addresses": list(peer.addresses), "reports": reports}
        (out / node_id).write_text(json.dumps(result))
        # Stay announced until the other side has its answer too.
        until = time.monotonic() + float(deadline)
        while not (out / peer_id).exists() and time.monotonic() < until:
            await asyncio.sleep(0.05)
        result["reports"] = reports
        (out / node_id).write_text(json.dumps(result))
    finally:
        await discovery.close()

asyncio.run(main())
"""


def _netns_problem() -> str | None:
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        return f"needs unshare and ip on PATH (unshare={unshare}, ip={ip})"
    probe = subprocess.run(
        [unshare, "-rn", ip, "link", "set", "lo", "up"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"`unshare -rn ip link set lo up` exited {probe.returncode}: {probe.stderr.strip()}"
    return None


@pytest.mark.parametrize("interfaces", [LOOPBACK, "all"])
def test_two_processes_in_a_private_network_namespace_find_each_other(
    tmp_path: Path, interfaces: str
) -> None:
    """Separate responders, isolated from any LAN; with ``all`` interfaces the
    namespace holds only loopback, which is what the nodes then announce."""
    problem = _netns_problem()
    if problem is not None:
        pytest.skip(f"cannot make a private network namespace here: {problem}")
    a_id, b_id = _node_id(), _node_id()
    node = '"$PY" -W error -c "$SCRIPT"'
    shell = (
        "ip link set lo up || exit 90; "
        f'{node} {a_id} 41071 {b_id} "$OUT" {DEADLINE_S} {interfaces} & a=$!; '
        f'{node} {b_id} 41072 {a_id} "$OUT" {DEADLINE_S} {interfaces} & b=$!; '
        'wait "$a"; ra=$?; wait "$b"; rb=$?; exit $((ra | rb))'
    )
    env = {**os.environ, "PY": sys.executable, "SCRIPT": _NODE_SCRIPT, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", shell],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=4 * DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    a_result = json.loads((tmp_path / a_id).read_text())
    b_result = json.loads((tmp_path / b_id).read_text())
    assert "error" not in a_result, a_result
    assert "error" not in b_result, b_result
    assert (a_result["node_id"], a_result["port"]) == (b_id, 41072)
    assert (b_result["node_id"], b_result["port"]) == (a_id, 41071)
    assert a_result["addresses"] == [LOOPBACK] == b_result["addresses"]
    assert a_id not in a_result["reports"]
    assert b_id not in b_result["reports"]
