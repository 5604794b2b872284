"""Hardware probes and the telemetry source, on the real machine.

``nvidia-smi`` is faked by a script placed first on PATH (there may be no GPU
here); it answers the same query the real one does, in the same CSV shape.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from skulk_core.cluster.health import derive_node_health
from skulk_core.cluster.telemetry import HealthLevel, NodeIdentityInfo, NodeTelemetry, Participation
from skulk_core.ids import NodeId, NodeInstallId
from skulk_core.state.state import State
from skulk_daemon.telemetry import hardware
from skulk_daemon.telemetry.hardware import (
    collect_memory,
    collect_system,
    detect_accelerator,
    detect_backends,
    detect_capability_conflicts,
    llama_cpp_has_cuda,
)
from skulk_daemon.telemetry.publisher import TelemetrySource, run_publisher

MIB = 1024**2
QUERY = "--query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits"
TWO_GPUS = "NVIDIA H200, 143771, 140000\nNVIDIA H200, 143771, 100000\n"


def fake_nvidia_smi(bin_dir: Path, body: str) -> Path:
    """An nvidia-smi that refuses any query but the one Skulk should send."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" != "{QUERY}" ]; then echo "unexpected query: $*" >&2; exit 2; fi\n'
        f"{body}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


@pytest.fixture
def gpu_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


@pytest.fixture
def cpu_only_llama_cpp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A llama_cpp laid out like a CPU-only wheel, found first on sys.path.

    A CUDA build cannot be installed here; this copies the wheel's file layout,
    which is all the build check reads.
    """
    site = tmp_path / "site"
    lib = site / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    (lib / "libllama.so").write_bytes(b"\x7fELF libggml-base.so libggml-cpu.so libc.so.6")
    (lib / "libggml-cpu.so").write_bytes(b"\x7fELF libc.so.6")
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    monkeypatch.syspath_prepend(str(site))
    llama_cpp_has_cuda.cache_clear()
    yield lib
    llama_cpp_has_cuda.cache_clear()


def identity() -> NodeIdentityInfo:
    return NodeIdentityInfo(
        friendly_name="test-node",
        node_install_id=NodeInstallId("00000000-0000-4000-8000-000000000000"),
        skulk_version="0.1.0",
    )


def source(models_dir: Path) -> TelemetrySource:
    return TelemetrySource(NodeId("node-a"), identity(), models_dir, Participation.FULL)


# -- memory and system ----------------------------------------------------------------


def test_memory_reports_the_real_machine() -> None:
    memory = collect_memory()
    assert memory.ram_total.in_bytes > 0
    assert 0 < memory.ram_available.in_bytes <= memory.ram_total.in_bytes
    assert memory.swap_total is not None
    assert memory.swap_available is not None
    assert 0 <= memory.swap_available.in_bytes <= memory.swap_total.in_bytes


def test_system_facts_are_filled_in(tmp_path: Path) -> None:
    system = collect_system(tmp_path)
    for fact in (system.os, system.os_version, system.machine, system.cpu_model):
        assert fact.strip()
        assert fact != "unknown"
    assert system.hostname.strip()
    assert system.cpu_count >= 1
    assert system.python_version == ".".join(map(str, sys.version_info[:3]))


def test_models_disk_is_measured_on_the_nearest_existing_parent(tmp_path: Path) -> None:
    system = collect_system(tmp_path / "not" / "created" / "yet")
    assert not (tmp_path / "not").exists()
    assert system.models_dir_total is not None
    assert system.models_dir_free is not None
    assert system.models_dir_total.in_bytes == shutil.disk_usage(tmp_path).total
    assert 0 <= system.models_dir_free.in_bytes <= system.models_dir_total.in_bytes


# -- accelerator ----------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "darwin", reason="Apple Silicon always has an accelerator")
def test_no_nvidia_smi_means_no_accelerator_and_no_complaint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_accelerator() == (None, [])


def test_two_nvidia_gpus_are_one_accelerator_with_summed_vram(gpu_bin: Path) -> None:
    fake_nvidia_smi(gpu_bin, f"printf '{TWO_GPUS}'")
    accelerator, reasons = detect_accelerator()
    assert reasons == []
    assert accelerator is not None
    assert accelerator.vendor == "nvidia"
    assert accelerator.name == "NVIDIA H200"
    assert accelerator.count == 2
    assert accelerator.vram_total is not None
    assert accelerator.vram_available is not None
    assert accelerator.vram_total.in_bytes == 2 * 143771 * MIB
    assert accelerator.vram_available.in_bytes == 240000 * MIB


def test_mixed_gpus_are_named_together(gpu_bin: Path) -> None:
    fake_nvidia_smi(
        gpu_bin, "printf 'NVIDIA RTX 4090, 24564, 20000\\nNVIDIA RTX 3090, 24576, 1\\n'"
    )
    accelerator, _ = detect_accelerator()
    assert accelerator is not None
    assert accelerator.name == "NVIDIA RTX 4090 + NVIDIA RTX 3090"


def test_gpu_memory_not_available_leaves_vram_unknown(gpu_bin: Path) -> None:
    fake_nvidia_smi(gpu_bin, "printf 'NVIDIA A100-SXM4-80GB MIG 1g.10gb, [N/A], [N/A]\\n'")
    accelerator, reasons = detect_accelerator()
    assert reasons == []
    assert accelerator is not None
    assert accelerator.vram_total is None
    assert accelerator.vram_available is None


def test_failing_nvidia_smi_degrades_detection(gpu_bin: Path) -> None:
    fake_nvidia_smi(
        gpu_bin, "echo 'Failed to initialize NVML: Driver/library version mismatch' >&2; exit 1"
    )
    accelerator, reasons = detect_accelerator()
    assert accelerator is None
    assert [r.code for r in reasons] == ["gpu_detection_degraded"]
    assert "version mismatch" in reasons[0].message
    assert reasons[0].remediation


def test_unparseable_nvidia_smi_output_degrades_detection(gpu_bin: Path) -> None:
    fake_nvidia_smi(gpu_bin, "echo 'something went sideways'")
    accelerator, reasons = detect_accelerator()
    assert accelerator is None
    assert [r.code for r in reasons] == ["gpu_detection_degraded"]


def test_hung_nvidia_smi_is_abandoned(gpu_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "PROBE_TIMEOUT_SECONDS", 0.2)
    fake_nvidia_smi(gpu_bin, "exec sleep 30")
    accelerator, reasons = detect_accelerator()
    assert accelerator is None
    assert [r.code for r in reasons] == ["gpu_detection_degraded"]
    assert "did not answer" in reasons[0].message


# -- backends and conflicts -----------------------------------------------------------


def test_installed_llama_cpp_is_offered_without_importing_it() -> None:
    probe = (
        "import sys\n"
        "from skulk_daemon.telemetry.hardware import detect_backends\n"
        "print(','.join(detect_backends(None)), 'llama_cpp' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    backends, imported = done.stdout.split()
    assert "llama_cpp" in backends.split(",")
    assert imported == "False"


def test_mlx_is_offered_only_when_installed() -> None:
    installed = all(importlib.util.find_spec(name) is not None for name in ("mlx", "mlx_lm"))
    assert ("mlx" in detect_backends(None)) == installed


def test_an_mlx_that_is_installed_but_cannot_run_is_not_offered(tmp_path: Path) -> None:
    # A package named mlx whose native core fails to load, as a Linux `mlx` wheel
    # without its CPU library does: found by name, useless as an engine.
    broken = tmp_path / "mlx"
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "core.py").write_text("raise ImportError('libmlx.so: cannot open shared object')\n")
    probe = (
        "from skulk_daemon.telemetry.hardware import detect_backends\n"
        "print(','.join(detect_backends(None)))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    backends = done.stdout.strip().split(",")
    assert "llama_cpp" in backends
    assert "mlx" not in backends


def test_the_installed_llama_cpp_build_can_be_judged() -> None:
    # If wheels move their libraries, the CUDA check silently stops working; fail here.
    llama_cpp_has_cuda.cache_clear()
    assert llama_cpp_has_cuda() is not None


def test_nvidia_gpu_with_cpu_only_llama_cpp_is_a_serving_conflict(
    gpu_bin: Path, cpu_only_llama_cpp: Path
) -> None:
    fake_nvidia_smi(gpu_bin, f"printf '{TWO_GPUS}'")
    accelerator, _ = detect_accelerator()
    backends = detect_backends(accelerator)
    conflicts = detect_capability_conflicts(accelerator, backends)
    assert [c.code for c in conflicts] == ["gpu_serving_disabled"]
    assert "CUDA" in conflicts[0].remediation


def test_cuda_llama_cpp_is_no_conflict(gpu_bin: Path, cpu_only_llama_cpp: Path) -> None:
    (cpu_only_llama_cpp / "libggml-cuda.so").write_bytes(b"\x7fELF libcudart.so.12")
    fake_nvidia_smi(gpu_bin, f"printf '{TWO_GPUS}'")
    accelerator, _ = detect_accelerator()
    assert detect_capability_conflicts(accelerator, detect_backends(accelerator)) == []


def test_cuda_linked_into_libllama_is_recognised(cpu_only_llama_cpp: Path) -> None:
    (cpu_only_llama_cpp / "libllama.so").write_bytes(b"\x7fELF libcudart.so.12 libcublas.so.12")
    assert llama_cpp_has_cuda() is True


def test_no_gpu_is_no_conflict(cpu_only_llama_cpp: Path) -> None:
    assert detect_capability_conflicts(None, ("llama_cpp",)) == []


# -- telemetry source and publisher ---------------------------------------------------


def test_a_memory_reserve_is_kept_out_of_what_placements_see(tmp_path: Path) -> None:
    reserve = 1024**3
    source = TelemetrySource(
        NodeId("node-a"), identity(), tmp_path, Participation.FULL, memory_reserve_bytes=reserve
    )
    before = collect_memory().ram_available.in_bytes
    seen = source.read().memory.ram_available.in_bytes
    after = collect_memory().ram_available.in_bytes
    # The machine's own figure moves a little between reads; the reserve does not.
    assert min(before, after) - reserve - 64 * 1024**2 <= seen <= max(before, after) - reserve
    everything = TelemetrySource(
        NodeId("node-a"), identity(), tmp_path, Participation.FULL, memory_reserve_bytes=2**60
    )
    assert everything.read().memory.ram_available.in_bytes == 0


def test_a_memory_limit_caps_what_placements_see(tmp_path: Path) -> None:
    limit = 512 * 1024**2
    capped = TelemetrySource(
        NodeId("node-a"), identity(), tmp_path, Participation.FULL, memory_limit_bytes=limit
    )
    memory = capped.read().memory
    # The limit less what this process's runners hold (other tests may have some
    # running), never more than the machine has free.
    assert memory.runners_rss is not None
    offered = max(0, limit - memory.runners_rss.in_bytes)
    assert memory.ram_available.in_bytes == min(offered, collect_memory().ram_available.in_bytes)
    assert memory.ram_total == collect_memory().ram_total
    generous = TelemetrySource(
        NodeId("node-a"), identity(), tmp_path, Participation.FULL, memory_limit_bytes=2**60
    )
    # A limit above what is free changes nothing: the machine's own figure shows.
    before = collect_memory().ram_available.in_bytes
    seen = generous.read().memory.ram_available.in_bytes
    after = collect_memory().ram_available.in_bytes
    assert min(before, after) - 64 * 1024**2 <= seen <= max(before, after) + 64 * 1024**2


def test_the_memory_runners_hold_is_read_from_their_own_pids(tmp_path: Path) -> None:
    held = 96 * 1024**2
    with subprocess.Popen(
        [sys.executable, "-c", f"b = bytearray({held}); print('held', flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == b"held\n"
            limit = 2 * 1024**3
            source = TelemetrySource(
                NodeId("node-a"),
                identity(),
                tmp_path,
                Participation.FULL,
                memory_limit_bytes=limit,
                runner_pids=lambda: (child.pid,),
            )
            memory = source.read().memory
            assert memory.runners_rss is not None
            assert held <= memory.runners_rss.in_bytes < held + 64 * 1024**2
            # What a runner holds already counts against the limit.
            assert memory.ram_available.in_bytes <= limit - memory.runners_rss.in_bytes
        finally:
            child.kill()
    # A runner gone since its pid was listed holds nothing.
    assert hardware.resident_bytes([child.pid]) == 0


def test_reading_describes_this_node(tmp_path: Path) -> None:
    stamp = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    telemetry = TelemetrySource(
        NodeId("node-a"),
        identity(),
        tmp_path,
        Participation.WORKER_ONLY,
        api_available=False,
        data_transport="zmq",
        clock=lambda: stamp,
    ).read()
    assert telemetry.node_id == "node-a"
    assert telemetry.identity == identity()
    assert telemetry.observed_at == stamp
    assert telemetry.memory.ram_total.in_bytes > 0
    assert telemetry.system.models_dir_free is not None
    resources = telemetry.resources
    assert "llama_cpp" in resources.backends
    assert resources.participation is Participation.WORKER_ONLY
    assert resources.api_available is False
    assert resources.data_transport == "zmq"


def test_degraded_gpu_detection_reaches_node_health(gpu_bin: Path, tmp_path: Path) -> None:
    fake_nvidia_smi(gpu_bin, "exit 1")
    telemetry = source(tmp_path).read()
    assert [c.code for c in telemetry.resources.capability_conflicts] == ["gpu_detection_degraded"]
    health = derive_node_health(State(), {telemetry.node_id: telemetry}, telemetry.observed_at)
    assert health[telemetry.node_id].level is HealthLevel.WARN


def test_gpu_without_a_cuda_engine_makes_the_node_unhealthy(
    gpu_bin: Path, cpu_only_llama_cpp: Path, tmp_path: Path
) -> None:
    fake_nvidia_smi(gpu_bin, f"printf '{TWO_GPUS}'")
    telemetry = source(tmp_path).read()
    assert telemetry.system.accelerator is not None
    assert telemetry.system.accelerator.count == 2
    health = derive_node_health(State(), {telemetry.node_id: telemetry}, telemetry.observed_at)
    entry = health[telemetry.node_id]
    assert entry.level is HealthLevel.ERROR
    # The machine's own disk may add models_disk_low (this reads the real filesystem).
    codes = [r.code for r in entry.reasons if not r.code.startswith("models_disk_")]
    assert codes == ["gpu_serving_disabled"]


def test_nvidia_smi_is_not_rerun_on_every_reading(gpu_bin: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake_nvidia_smi(gpu_bin, f"echo run >> '{calls}'; printf '{TWO_GPUS}'")
    telemetry = source(tmp_path)
    for _ in range(3):
        telemetry.read()
    assert calls.read_text().splitlines() == ["run"]


def test_publisher_republishes_until_stopped_and_survives_errors(tmp_path: Path) -> None:
    published: list[NodeTelemetry] = []

    def publish(reading: NodeTelemetry) -> None:
        published.append(reading)
        if len(published) == 1:
            raise RuntimeError("transport hiccup")
        if len(published) == 3:
            stop.set()

    stop = asyncio.Event()

    async def main() -> None:
        await asyncio.wait_for(run_publisher(source(tmp_path), publish, 0.01, stop), timeout=30)

    asyncio.run(main())
    assert len(published) == 3
    assert all(reading.node_id == "node-a" for reading in published)


def test_publisher_stops_at_once_when_stop_is_set(tmp_path: Path) -> None:
    published: list[NodeTelemetry] = []
    stop = asyncio.Event()

    def publish(reading: NodeTelemetry) -> None:
        published.append(reading)
        stop.set()

    async def main() -> None:
        # An hour-long interval: returning at all proves the wait ends on stop.
        await asyncio.wait_for(run_publisher(source(tmp_path), publish, 3600, stop), timeout=30)

    asyncio.run(main())
    assert len(published) == 1
