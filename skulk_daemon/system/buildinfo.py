"""Which build this node runs: the package version and, from a checkout, the commit."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def source_commit() -> str | None:
    """The checkout's HEAD commit, or None for an installed wheel or no git."""
    if not (_SOURCE_ROOT / ".git").exists():
        return None
    try:
        result = subprocess.run(
            ["git", "-C", str(_SOURCE_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and commit else None
