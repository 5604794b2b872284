"""System power over a window of time, for the bench routes' ``power_usage``.

Two sources, both optional:

- Linux RAPL energy counters (``/sys/class/powercap/intel-rapl:N/energy_uj``, one
  per CPU package): the energy used between two reads, divided by the time, is the
  exact average power over the window. Many kernels make the counters root-only;
  an unreadable counter simply is not a source.
- ``nvidia-smi --query-gpu=power.draw``, sampled at both ends of the window and
  averaged.

A node with neither reports no figure (``None``) rather than a guess.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from skulk_daemon.telemetry.hardware import run_quiet

POWERCAP_ROOT = Path("/sys/class/powercap")
_NVIDIA_POWER_QUERY = ("--query-gpu=power.draw", "--format=csv,noheader,nounits")


@dataclass(frozen=True, slots=True)
class PowerReading:
    watts: float
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PowerSample:
    at: float
    rapl_uj: dict[Path, tuple[int, int]]
    """Per package: (energy_uj, max_energy_range_uj)."""
    gpu_watts: float | None


def _rapl_packages(root: Path) -> list[Path]:
    # Top-level zones are packages (intel-rapl:0); subzones (intel-rapl:0:0) are
    # cores/uncore/dram already counted in their package.
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)


def _read_rapl(root: Path) -> dict[Path, tuple[int, int]]:
    found: dict[Path, tuple[int, int]] = {}
    for zone in _rapl_packages(root):
        try:
            energy = int((zone / "energy_uj").read_text().strip())
            limit = int((zone / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            continue
        found[zone] = (energy, limit)
    return found


def _gpu_watts() -> float | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = run_quiet(("nvidia-smi", *_NVIDIA_POWER_QUERY))
    if out is None:
        return None
    total = 0.0
    for line in out.splitlines():
        try:
            total += float(line.strip())
        except ValueError:
            return None  # "[N/A]": this GPU cannot report power
    return total


class PowerMeter:
    """Measure average system power between :meth:`start` and :meth:`stop`."""

    def __init__(self, powercap_root: Path = POWERCAP_ROOT) -> None:
        self._root = powercap_root

    def _sample(self) -> PowerSample:
        return PowerSample(
            at=time.monotonic(), rapl_uj=_read_rapl(self._root), gpu_watts=_gpu_watts()
        )

    async def start(self) -> PowerSample:
        return await asyncio.to_thread(self._sample)

    async def stop(self, begin: PowerSample) -> PowerReading | None:
        end = await asyncio.to_thread(self._sample)
        return average_power(begin, end)


def average_power(begin: PowerSample, end: PowerSample) -> PowerReading | None:
    elapsed = end.at - begin.at
    watts = 0.0
    sources: list[str] = []
    if elapsed > 0:
        joules = 0.0
        for zone, (energy, limit) in end.rapl_uj.items():
            if zone not in begin.rapl_uj:
                continue
            delta = energy - begin.rapl_uj[zone][0]
            if delta < 0:  # the counter wrapped
                delta += limit
            joules += delta / 1e6
        if end.rapl_uj and begin.rapl_uj:
            watts += joules / elapsed
            sources.append("rapl")
    if begin.gpu_watts is not None and end.gpu_watts is not None:
        watts += (begin.gpu_watts + end.gpu_watts) / 2
        sources.append("nvidia-smi")
    return PowerReading(watts=round(watts, 3), sources=tuple(sources)) if sources else None
