"""``python -m skulk_daemon`` with a shorter extension ``on_stop`` budget.

The real budget (30 s) would make every test of a shutdown past a hung hook wait
30 s; this runs the same daemon, with the same shutdown path, under
:data:`TEST_BUDGET_SECONDS`. Run as ``python -m tests.daemon.short_budget_daemon`` from
the repository root (``DaemonProcess(launcher=SHORT_BUDGET_LAUNCHER)``).
"""

from __future__ import annotations

import sys
from typing import Final

from skulk_daemon.extensions import lifecycle
from skulk_daemon.serve import main

TEST_BUDGET_SECONDS: Final = 3.0
SHORT_BUDGET_LAUNCHER: Final = ("-m", "tests.daemon.short_budget_daemon")

if __name__ == "__main__":
    lifecycle.SHUTDOWN_BUDGET_SECONDS = TEST_BUDGET_SECONDS  # type: ignore[misc]
    sys.exit(main())
