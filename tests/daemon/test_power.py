"""Average system power over a request, from RAPL energy counters (and nvidia-smi):
the figure the bench routes report as ``power_usage``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from skulk_daemon.telemetry import power
from skulk_daemon.telemetry.power import PowerMeter, PowerReading, PowerSample, average_power


def _zone(root: Path, name: str, energy_uj: int, limit_uj: int = 10**12) -> Path:
    zone = root / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{limit_uj}\n")
    return zone


def test_rapl_energy_over_time_is_the_average_power_of_the_packages() -> None:
    a, b = Path("/rapl/intel-rapl:0"), Path("/rapl/intel-rapl:1")
    begin = PowerSample(at=10.0, rapl_uj={a: (1_000_000, 10**12), b: (0, 10**12)}, gpu_watts=None)
    end = PowerSample(
        at=12.0, rapl_uj={a: (31_000_000, 10**12), b: (10_000_000, 10**12)}, gpu_watts=None
    )
    reading = average_power(begin, end)
    assert reading is not None
    assert reading.watts == pytest.approx(20.0)  # (30 J + 10 J) / 2 s
    assert reading.sources == ("rapl",)


def test_a_wrapped_counter_and_gpu_samples_are_counted() -> None:
    a = Path("/rapl/intel-rapl:0")
    begin = PowerSample(at=0.0, rapl_uj={a: (9_000_000, 10_000_000)}, gpu_watts=100.0)
    end = PowerSample(at=1.0, rapl_uj={a: (1_000_000, 10_000_000)}, gpu_watts=140.0)
    reading = average_power(begin, end)
    assert reading is not None
    assert reading.watts == pytest.approx(2.0 + 120.0)  # 2 J across the wrap, GPU mean
    assert reading.sources == ("rapl", "nvidia-smi")


def test_no_source_means_no_figure() -> None:
    empty = PowerSample(at=0.0, rapl_uj={}, gpu_watts=None)
    assert average_power(empty, PowerSample(at=1.0, rapl_uj={}, gpu_watts=None)) is None


def test_the_meter_reads_packages_only_and_skips_unreadable_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(power, "_gpu_watts", lambda: None)
    package = _zone(tmp_path, "intel-rapl:0", 5_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 0)  # a subzone, already in its package
    locked = _zone(tmp_path, "intel-rapl:1", 0)
    (locked / "energy_uj").chmod(0)  # root-only on many kernels
    meter = PowerMeter(tmp_path)

    async def measure() -> PowerReading | None:
        begin = await meter.start()
        (package / "energy_uj").write_text("6000000\n")
        return await meter.stop(begin)

    reading = asyncio.run(measure())
    assert reading is not None
    assert reading.sources == ("rapl",)
    assert reading.watts > 0
