"""Facts about the machine this node runs on, read from the machine itself.

Everything here is a probe: it touches ``/proc``, the filesystem, ``psutil`` or a
subprocess. The static probes (CPU model) are cached per process; memory and disk
are read fresh on every call. :class:`~skulk_daemon.telemetry.publisher.TelemetrySource`
decides how often the slower probes (``nvidia-smi``, backend discovery) run.
"""

from __future__ import annotations

import functools
import importlib.util
import mmap
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

import psutil

from skulk_core.cluster.telemetry import Accelerator, HealthReason, NodeMemory, NodeSystem
from skulk_core.models.cards import Memory
from skulk_daemon.system.media_settings import media_backends
from skulk_daemon.telemetry.mlx_probe import mlx_runs

# nvidia-smi normally answers in well under a second; a wedged driver can hang it
# for minutes, and a telemetry tick must not wait on that. Same bound for sysctl.
PROBE_TIMEOUT_SECONDS = 3.0
NVIDIA_SMI_QUERY = (
    "--query-gpu=name,memory.total,memory.free",
    "--format=csv,noheader,nounits",
)
_MIB = 1024**2
# Enough of nvidia-smi's complaint to recognise the failure, not a wall of text.
_MAX_PROBE_DETAIL_CHARS = 200

BACKEND_LLAMA_CPP = "llama_cpp"
BACKEND_MLX = "mlx"
BACKEND_CTRANSLATE2 = "ctranslate2"  # faster-whisper (speech to text)
BACKEND_ONNXRUNTIME = "onnxruntime"  # ONNX voices (text to speech)
BACKEND_SD_CPP = "stable_diffusion_cpp"  # stable-diffusion.cpp (images)

GPU_DETECTION_DEGRADED = "gpu_detection_degraded"
GPU_SERVING_DISABLED = "gpu_serving_disabled"


def collect_memory() -> NodeMemory:
    """RAM and swap as the kernel reports them right now."""
    ram = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return NodeMemory(
        ram_total=Memory(in_bytes=int(ram.total)),
        ram_available=Memory(in_bytes=int(ram.available)),
        swap_total=Memory(in_bytes=int(swap.total)),
        swap_available=Memory(in_bytes=int(swap.free)),
    )


def resident_bytes(pids: Iterable[int]) -> int:
    """The resident memory of processes ``pids`` (this daemon's runners), summed;
    one that has exited meanwhile counts 0. Reads each process's own ``/proc``
    entries rather than walking the whole process table, which an idle daemon's
    telemetry would otherwise do every tick."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total


def collect_system(models_dir: Path) -> NodeSystem:
    """OS, CPU and host facts, plus the models volume's size and free space.

    The accelerator is left unset; it comes from :func:`detect_accelerator`.
    """
    disk = _disk_usage(models_dir)
    return NodeSystem(
        os=platform.system() or "unknown",
        os_version=_os_version(),
        machine=platform.machine() or "unknown",
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        hostname=socket.gethostname() or platform.node() or "unknown",
        python_version=platform.python_version(),
        models_dir_total=None if disk is None else Memory(in_bytes=disk[0]),
        models_dir_free=None if disk is None else Memory(in_bytes=disk[1]),
    )


def _os_version() -> str:
    if platform.system() == "Darwin":
        mac = platform.mac_ver()[0]
        if mac:
            return mac
    return platform.release() or "unknown"


@functools.cache
def cpu_model() -> str:
    """A human CPU name ("AMD EPYC 9654"), never empty. Cached: it cannot change."""
    if platform.system() == "Linux":
        name = _cpuinfo_model(Path("/proc/cpuinfo"))
        if name:
            return name
    elif platform.system() == "Darwin":
        name = run_quiet(("sysctl", "-n", "machdep.cpu.brand_string"))
        if name:
            return name
    return platform.processor() or platform.machine() or "unknown"


def _cpuinfo_model(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # x86 says "model name"; some ARM kernels only say "Hardware" or "Processor".
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if sep and value and key not in found:
            found[key] = value
    for key in ("model name", "hardware", "processor"):
        value = found.get(key, "")
        # On x86 "processor" is just the core index.
        if value and not value.isdigit():
            return value
    return None


def run_quiet(argv: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def _disk_usage(models_dir: Path) -> tuple[int, int] | None:
    """(total, free-to-this-user) bytes of the volume the models dir lives on.

    The dir may not exist yet on a fresh node, so measure its nearest existing
    ancestor: that is the volume the first download will land on.
    """
    path = models_dir.expanduser().absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                usage = shutil.disk_usage(candidate)
            except OSError:
                return None
            return usage.total, usage.free
    return None


def detect_accelerator() -> tuple[Accelerator | None, list[HealthReason]]:
    """The node's accelerator, and any reason its detection is in doubt.

    NVIDIA: every GPU ``nvidia-smi`` lists is parsed and the node reports them as
    one accelerator: ``count`` GPUs, VRAM summed. llama.cpp splits a model's layers
    over every visible GPU by default, so the sum is the capacity a placement can
    actually use; ``name`` is the first GPU's name, or the distinct names joined
    with " + " on a mixed box. An ``nvidia-smi`` that is on PATH but fails, times
    out or prints nothing parseable yields ``gpu_detection_degraded``.

    Apple Silicon: vendor ``apple``, unified memory, so VRAM is system RAM.
    Anything else: ``None``. This probe is not cached; callers throttle it.
    """
    if shutil.which("nvidia-smi") is not None:
        return _detect_nvidia()
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        ram = psutil.virtual_memory()
        return (
            Accelerator(
                vendor="apple",
                name=cpu_model(),
                vram_total=Memory(in_bytes=int(ram.total)),
                vram_available=Memory(in_bytes=int(ram.available)),
            ),
            [],
        )
    return None, []


def _detect_nvidia() -> tuple[Accelerator | None, list[HealthReason]]:
    try:
        done = subprocess.run(
            ("nvidia-smi", *NVIDIA_SMI_QUERY),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, [_degraded(f"nvidia-smi did not answer in {PROBE_TIMEOUT_SECONDS:g} s")]
    except OSError as exc:
        return None, [_degraded(f"nvidia-smi could not be run: {exc.strerror or exc}")]
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip())[:_MAX_PROBE_DETAIL_CHARS]
        return None, [_degraded(f"nvidia-smi exited with status {done.returncode}: {detail}")]
    return parse_nvidia_smi(done.stdout)


def parse_nvidia_smi(output: str) -> tuple[Accelerator | None, list[HealthReason]]:
    """Parse ``name, memory.total, memory.free`` CSV rows (MiB, no units)."""
    names: list[str] = []
    totals: list[int | None] = []
    frees: list[int | None] = []
    bad_rows = 0
    for line in output.splitlines():
        if not line.strip():
            continue
        # A GPU name could in principle hold a comma; the numbers never do.
        parts = [part.strip() for part in line.rsplit(",", 2)]
        if len(parts) != 3 or not parts[0]:
            bad_rows += 1
            continue
        names.append(parts[0])
        totals.append(_mib(parts[1]))
        frees.append(_mib(parts[2]))
    reasons: list[HealthReason] = []
    if bad_rows:
        reasons.append(_degraded(f"nvidia-smi printed {bad_rows} row(s) Skulk could not parse"))
    if not names:
        if not reasons and output.strip():
            reasons.append(_degraded("nvidia-smi printed no GPU rows Skulk could parse"))
        return None, reasons
    # A GPU whose memory reads "[N/A]" (MIG, some vGPUs) makes the sum meaningless.
    total = None if None in totals else sum(t for t in totals if t is not None)
    free = None if None in frees else sum(f for f in frees if f is not None)
    distinct = list(dict.fromkeys(names))
    accelerator = Accelerator(
        vendor="nvidia",
        name=" + ".join(distinct),
        count=len(names),
        vram_total=None if total is None else Memory(in_bytes=total * _MIB),
        vram_available=None if free is None else Memory(in_bytes=free * _MIB),
    )
    return accelerator, reasons


def _mib(text: str) -> int | None:
    try:
        value = int(float(text))
    except ValueError:
        return None
    return value if value >= 0 else None


def _degraded(what: str) -> HealthReason:
    return HealthReason(
        code=GPU_DETECTION_DEGRADED,
        message=f"An NVIDIA driver is installed but the GPU could not be fully detected: {what}.",
        remediation=(
            "Run `nvidia-smi` on this node and fix what it reports (driver/library version "
            "mismatch, missing device permissions, a wedged GPU); then restart Skulk."
        ),
    )


def detect_backends(accelerator: Accelerator | None) -> tuple[str, ...]:
    """The engines this node can serve with, found without importing them
    (MLX is also run once, in a child process: see :mod:`.mlx_probe`).

    ``accelerator`` is accepted so a caller can pass what it saw; today an engine
    is offered whenever its package is installed, whatever the hardware.
    """
    del accelerator  # NOTE: kept in the signature for hardware-gated engines.
    engines = (
        BACKEND_LLAMA_CPP,
        BACKEND_MLX,
        BACKEND_CTRANSLATE2,
        BACKEND_ONNXRUNTIME,
        BACKEND_SD_CPP,
    )
    found = [name for name in engines if _findable(name)]
    if BACKEND_MLX in found and not (_findable("mlx_lm") and mlx_runs()):
        found.remove(BACKEND_MLX)  # installed, but the engine cannot run here
    return tuple(sorted([*found, *media_backends()]))


def detect_capability_conflicts(
    accelerator: Accelerator | None, backends: Sequence[str]
) -> list[HealthReason]:
    """Disagreements between the hardware seen and the engines installed.

    Today: a visible NVIDIA GPU while the only GPU-capable engine, llama.cpp, was
    built without CUDA (``gpu_serving_disabled``). When the build cannot be judged
    from its files, no conflict is claimed.
    """
    if accelerator is None or accelerator.vendor != "nvidia":
        return []
    if BACKEND_LLAMA_CPP not in backends or llama_cpp_has_cuda() is not False:
        return []
    return [
        HealthReason(
            code=GPU_SERVING_DISABLED,
            message=(
                f"This node has {accelerator.count} NVIDIA GPU(s) ({accelerator.name}) but the "
                "installed llama-cpp-python was built without CUDA, so models here run on the "
                "CPU far below the hardware's speed."
            ),
            remediation=(
                "Reinstall llama-cpp-python with CUDA: "
                'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir '
                "llama-cpp-python (needs the CUDA toolkit), then restart Skulk."
            ),
        )
    ]


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def llama_cpp_has_cuda() -> bool | None:
    """Whether the installed llama.cpp build can use CUDA, judged from its files.

    Current wheels ship the CUDA backend as ``lib/libggml-cuda*``; older builds
    linked it into ``libggml``/``libllama``, which then name ``libcudart``. ``None``
    when llama_cpp is absent or its library dir is not where wheels put it.
    Importing llama_cpp would answer exactly but costs seconds and loads the
    libraries into the daemon, so only the files are read. Cached per process.
    """
    try:
        spec = importlib.util.find_spec(BACKEND_LLAMA_CPP)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    if not lib_dir.is_dir():
        return None
    if any(lib_dir.glob("*ggml-cuda*")):
        return True
    # The versioned names are symlinks to one file each; read each file once.
    libraries = {path.resolve() for path in (*lib_dir.glob("libggml*"), *lib_dir.glob("libllama*"))}
    if not libraries:
        return None
    return any(_mentions(path, b"libcudart") for path in sorted(libraries) if path.is_file())


def _mentions(path: Path, needle: bytes) -> bool:
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(needle) != -1
    except (OSError, ValueError):
        return False
