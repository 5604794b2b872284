"""The node starts without loading what only some requests use (issue 43): audio and
video codecs, numpy, the HTML parser, python-tuf (with urllib3) and the OpenTelemetry SDK
load where they run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFERRED = ("numpy", "av", "bs4", "tuf", "urllib3", "opentelemetry")


def test_importing_the_daemon_loads_no_codec_parser_or_tuf() -> None:
    code = (
        "import sys, skulk_daemon.serve\n"
        f"print('LOADED', sorted(m for m in {DEFERRED!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert "LOADED []" in done.stdout, done.stdout + done.stderr
