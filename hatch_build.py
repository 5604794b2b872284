"""Compiles the sampled draw's C kernel (``skulk_daemon/engines/_draw_kernel.c``).

A hatchling build hook. An editable install (``uv sync``, ``uv run``) builds the
library next to its source; a wheel carries it and is tagged for the platform.
Without a C compiler the build goes on and says so: the draw then computes the
same sums in numpy, more slowly (``skulk_daemon/engines/_draw_native.py``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = "skulk_daemon/engines/_draw_kernel.c"
LIBRARY = "skulk_daemon/engines/_draw_kernel.so"
FLAGS = ["-O3", "-fno-math-errno", "-fPIC", "-shared", "-Wall", "-Wno-psabi"]
LIBS = ["-lm"]


def compile_kernel(source: Path, target: Path) -> str | None:
    """Builds ``target`` from ``source``; ``None`` on success, else why not.

    Built beside it and renamed over it: a daemon or test that has the old library
    loaded keeps its mapping (an in-place rewrite could crash it)."""
    compiler = shlex.split(os.environ.get("CC", "cc"))
    building = target.with_name(f".{target.name}.{os.getpid()}")
    command = [*compiler, *FLAGS, str(source), "-o", str(building), *LIBS]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        building.unlink(missing_ok=True)
        return f"{shlex.join(command)}: {exc}"
    if done.returncode != 0:
        building.unlink(missing_ok=True)
        return f"{shlex.join(command)} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
    os.replace(building, target)
    return None


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if version == "editable":
            target = root / LIBRARY
        else:  # removed in finalize, once the wheel holds it
            self._scratch = tempfile.mkdtemp(prefix="skulk-kernel-")
            target = Path(self._scratch) / "_draw_kernel.so"
        failure = compile_kernel(root / SOURCE, target)
        if failure is not None:
            print(
                f"skulk: the draw kernel was not built ({failure}); numpy is used", file=sys.stderr
            )
            return
        if version != "editable":
            build_data["force_include"][str(target)] = LIBRARY
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
