"""How many workers ``-n auto`` starts (tests/xdist_scheduling.py)."""

from __future__ import annotations

from pathlib import Path

from tests.xdist_scheduling import available_memory, worker_count

GIB = 2**30


def test_two_workers_more_than_the_cpus_where_memory_allows() -> None:
    assert worker_count(2, 22 * GIB) == 4
    assert worker_count(16, 128 * GIB) == 18


def test_memory_bounds_the_workers_never_below_one() -> None:
    assert worker_count(2, 7 * GIB) == 2  # a 2-core CI runner with 7 GiB free
    assert worker_count(2, 10 * GIB) == 3
    assert worker_count(16, 32 * GIB) == 10
    assert worker_count(4, 1 * GIB) == 1


def test_unknown_memory_leaves_the_cpu_count() -> None:
    assert worker_count(2, None) == 4
    assert worker_count(0, None) == 3


def test_available_memory_reads_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683784 kB\nMemAvailable:   22497816 kB\n")
    assert available_memory(meminfo) == 22497816 * 1024
    assert available_memory(tmp_path / "absent") is None
    meminfo.write_text("MemTotal:       24683784 kB\n")
    assert available_memory(meminfo) is None


def test_every_module_on_the_fixed_address_lan_is_in_the_network_group() -> None:
    """tests/security/lan.py's LAN has fixed addresses: two at once on two workers route
    each other's replies astray, so its modules run one at a time in ``network``."""
    tests = Path(__file__).parent
    users = {
        str(path.relative_to(tests)): text
        for path in tests.rglob("test_*.py")
        if "from tests.security.lan import" in (text := path.read_text(encoding="utf-8"))
    }
    assert len(users) >= 5  # the scan finds them (five when this was written)
    outside = [name for name, text in users.items() if 'xdist_group("network")' not in text]
    assert outside == []
