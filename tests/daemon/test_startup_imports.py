"""The node starts without loading what only some requests use (issue 43): audio and
video codecs, numpy, the HTML parser, python-tuf (with urllib3), the OpenTelemetry SDK,
httpx (and the rich/pygments its CLI pulls in), Jinja, jsonschema, zeroconf (mDNS off)
and the plugin manager's release handling (``packaging``) load where they run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skulk_core.extensions.capabilities import CapabilityDescriptor
from skulk_daemon.capabilities.schema import Schema
from skulk_daemon.providers.vad import VAD_DESCRIPTOR
from skulk_daemon.speech.providers import STT_DESCRIPTOR, TTS_DESCRIPTOR
from skulk_daemon.speech.realtime_provider import REALTIME_DESCRIPTOR

ROOT = Path(__file__).resolve().parents[2]
DEFERRED = (
    "numpy",
    "av",
    "bs4",
    "tuf",
    "urllib3",
    "opentelemetry",
    "httpx",
    "httpx2",
    "rich",
    "pygments",
    "jinja2",
    "jsonschema",
    "referencing",
    "zeroconf",
    "packaging",
)


def test_importing_the_daemon_loads_no_codec_parser_or_tuf() -> None:
    code = (
        "import sys, skulk_daemon.serve\n"
        f"print('LOADED', sorted(m for m in {DEFERRED!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert "LOADED []" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    "descriptor",
    [VAD_DESCRIPTOR, TTS_DESCRIPTOR, STT_DESCRIPTOR, REALTIME_DESCRIPTOR],
    ids=lambda d: d.id,
)
def test_every_first_party_schema_is_a_valid_json_schema(
    descriptor: CapabilityDescriptor,
) -> None:
    # First-party schemas are compiled on first use, not as the node starts: an invalid
    # one must fail here, not on a caller's first request.
    for schema in (
        descriptor.input_schema,
        descriptor.output_schema,
        descriptor.input_chunk_schema,
        descriptor.output_chunk_schema,
    ):
        if schema is not None:
            Schema(schema)


def test_the_app_class_leaves_litestars_pydantic_plugins_out() -> None:
    # Litestar loads its pydantic plugins (0.16 CPU-s) whenever pydantic is installed;
    # the node's app class leaves them out. This fails if a Litestar upgrade renames the
    # hook it overrides.
    code = (
        "import sys\n"
        "from litestar import get\n"
        "from skulk_daemon.api.lean_litestar import LeanLitestar\n"
        "@get('/x', sync_to_thread=False)\n"
        "def x() -> str:\n"
        "    return 'x'\n"
        "app = LeanLitestar(route_handlers=[x])\n"
        "print('PLUGINS', sorted(type(p).__name__ for p in app.plugins))\n"
        "print('PYDANTIC', 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert "PYDANTIC False" in done.stdout, done.stdout + done.stderr
    assert "MsgspecDIPlugin" in done.stdout, done.stdout
