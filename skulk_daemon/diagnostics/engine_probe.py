"""What the llama.cpp bindings on this machine are, probed once in a child process.

The daemon does not load the native library itself (runners do), and asking the
kernel for AMX tile state changes the asking process: both happen in a short-lived
``python -P`` child. The answer is cached for the life of the daemon (a rebuild of
the bindings means a restart).
"""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Final

from skulk_core.diagnostics.doctor import EngineBuild

PROBE_TIMEOUT_SECONDS: Final = 30.0
_PROBE: Final = """
import ctypes, json, platform
out = {}
try:
    import llama_cpp
    out["system_info"] = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    out["rpc"] = bool(llama_cpp.llama_supports_rpc())
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
if platform.system() == "Linux" and platform.machine() == "x86_64":
    # arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): may this process use AMX?
    libc = ctypes.CDLL(None, use_errno=True)
    out["amx_permitted"] = libc.syscall(158, 0x1023, 18) == 0
print(json.dumps(out))
"""

_cached: list[EngineBuild] = []


async def engine_build() -> EngineBuild:
    """The probe's answer (run on first use; concurrent first callers may both probe)."""
    if not _cached:
        _cached.append(await asyncio.to_thread(_probe))
    return _cached[0]


def _probe() -> EngineBuild:
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
            cwd="/",
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return EngineBuild(importable=False, error=f"the engine probe failed: {exc}")
    return EngineBuild(
        importable="error" not in result,
        error=str(result.get("error", "")),
        system_info=str(result.get("system_info", "")),
        supports_rpc=bool(result.get("rpc", False)),
        cpu_advertises_amx=_cpu_has_amx(),
        kernel_permits_amx=result.get("amx_permitted"),
    )


def _cpu_has_amx() -> bool:
    if platform.system() != "Linux":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_tile" in flags
