"""Whether the MLX engine really runs here, not just whether its package is found.

``mlx`` can be installed and still unusable: a Linux wheel without its CPU
library (``mlx`` alone, no ``mlx-cpu``), a macOS build on Intel, a missing
``mlx-lm``. A node that advertised ``mlx`` then would be sent MLX models and
refuse each one at load time. So the probe runs one tiny MLX computation in a
child process (MLX never maps into the daemon) once per daemon, and only a node
where it succeeds offers the ``mlx`` backend.
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from typing import Final

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S: Final = 60.0
_PROBE: Final = (
    "import importlib.util, mlx.core as mx\n"
    "assert importlib.util.find_spec('mlx_lm') is not None, 'mlx-lm is not installed'\n"
    "assert (mx.array([1.0, 2.0]) * 2).sum().item() == 6.0\n"
)


@functools.cache
def mlx_runs() -> bool:
    """One MLX computation in a child process succeeded (cached per process)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("MLX is installed but its probe did not finish: %s", exc)
        return False
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        log.info("MLX is installed but does not run here, so no mlx backend: %s", last)
        return False
    return True
