"""``python -m bench.fabric`` (or ``python bench/fabric``): see :mod:`bench.fabric`."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # `python bench/fabric`: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fabric import main

if __name__ == "__main__":
    raise SystemExit(main())
