"""Store-to-node staging throughput against a plain HTTP range download, on loopback.

A daemon is started as the model store (``model_store.store_host``) over a store
path holding one model: the demo GGUF (hard-linked), its SHA-256 manifest and card
record, which the store adopts at start. Then, alternately (ABAB, ``--reps`` pairs
after one discarded warm-up pair), the same file is fetched

- by Skulk's staging code (:mod:`skulk_daemon.store.staging`: the store's internal
  transport, ``Range`` requests, SHA-256 verified against the manifest, fsync,
  rename), and
- by a plain HTTP range download (``Range: bytes=0-``) from Python's stdlib
  ``ThreadingHTTPServer`` serving the same file, written and fsynced, not hashed.

Each side writes into a fresh directory on the same filesystem. The medians of the
wall times give the throughputs; the figure is staging / plain.

Target: ratio >= 0.9.

Run from the repository root::

    .venv/bin/python -m bench.store_staging [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final

import httpx
import msgspec

if __package__ in (None, ""):  # `python bench/store_staging.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    LoggedDaemon,
    add_run_options,
    demo_model_path,
    machine,
    median,
    print_json,
    wait_for_quiet,
)
from skulk_daemon.hub.manifest import FileManifest, ManifestFile, file_digests, write_manifest
from skulk_daemon.models.sidecar import read_sidecar, sidecar_path, write_sidecar
from skulk_daemon.store.staging import _fetch_all, _Transfer
from tests.daemon_process import free_port

MODEL_ID: Final = "bench/store-staging"
CHUNK: Final = 4 * 1024 * 1024
TARGET: Final = 0.9


def _handler(path: Path) -> type[BaseHTTPRequestHandler]:
    size = path.stat().st_size

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            start = 0
            header = self.headers.get("range")
            if header and header.startswith("bytes=") and header.endswith("-"):
                start = int(header[len("bytes=") : -1])
            self.send_response(206 if header else 200)
            self.send_header("content-length", str(size - start))
            if header:
                self.send_header("content-range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            with path.open("rb") as handle:
                handle.seek(start)
                shutil.copyfileobj(handle, self.wfile, CHUNK)

    return Handler


def _plain(url: str, target: Path) -> None:
    with (
        httpx.Client(timeout=60) as client,
        client.stream("GET", url, headers={"range": "bytes=0-"}) as answer,
        target.open("wb") as handle,
    ):
        answer.raise_for_status()
        for chunk in answer.iter_bytes(CHUNK):
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())


def _seed_store(store: Path, gguf: Path) -> FileManifest:
    model_dir = store / MODEL_ID.replace("/", "--")
    model_dir.mkdir(parents=True)
    os.link(gguf, model_dir / gguf.name)
    card = read_sidecar(sidecar_path(gguf.parent)).card
    card = msgspec.structs.replace(card, model_id=MODEL_ID)
    sha256, _ = file_digests(gguf)
    files = (ManifestFile(path=gguf.name, size=gguf.stat().st_size, sha256=sha256),)
    write_manifest(model_dir, files)
    write_sidecar(model_dir, card, int(time.time()))
    return FileManifest(version=1, files=files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    add_run_options(parser)
    args = parser.parse_args()
    load = wait_for_quiet(args.max_load)
    with tempfile.TemporaryDirectory(prefix="skulk-bench-store-") as tmp:
        root = Path(tmp)
        args.models_dir.mkdir(parents=True, exist_ok=True)
        store_port = free_port()
        daemon = LoggedDaemon(root=root / "daemon", models_dir=args.models_dir)
        daemon.config_home.mkdir(parents=True, exist_ok=True)
        (daemon.config_home / "skulk.yaml").write_text(
            f"model_store:\n  store_host: true\n  store_path: {root / 'store'}\n"
            f"  store_port: {store_port}\n"
        )
        try:
            daemon.start()  # installs the demo model on first use
            gguf = demo_model_path(args.models_dir)
            daemon.kill()
            manifest = _seed_store(root / "store", gguf)
            daemon.start()
            base = f"http://127.0.0.1:{store_port}"
            files = httpx.get(f"{base}/models/{MODEL_ID.replace('/', '%2F')}/files", timeout=30)
            files.raise_for_status()
            plain_server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(gguf))
            threading.Thread(target=plain_server.serve_forever, daemon=True).start()
            plain_url = f"http://127.0.0.1:{plain_server.server_address[1]}/{gguf.name}"
            size = gguf.stat().st_size
            staged: list[float] = []
            plain: list[float] = []
            for rep in range(args.reps + 1):
                out = root / f"out-{rep}"
                out.mkdir()
                began = time.perf_counter()
                transfer = _Transfer(
                    base, MODEL_ID, out / "staged", lambda _n: None, threading.Event()
                )
                _fetch_all(transfer, manifest)
                staged_s = time.perf_counter() - began
                began = time.perf_counter()
                _plain(plain_url, out / "plain.gguf")
                plain_s = time.perf_counter() - began
                shutil.rmtree(out)
                if rep:  # the first pair warms the page cache and the connections
                    staged.append(staged_s)
                    plain.append(plain_s)
            plain_server.shutdown()
        finally:
            daemon.kill()
    staged_mbs = size / median(staged) / 1e6
    plain_mbs = size / median(plain) / 1e6
    ratio = staged_mbs / plain_mbs
    print(f"file: {size} bytes, {args.reps} pairs (load {load:.2f})")
    print(f"staging from the store: {staged_mbs:8.1f} MB/s (SHA-256 verified)")
    print(f"plain HTTP range GET:   {plain_mbs:8.1f} MB/s")
    print(f"ratio {ratio:.3f} (target >= {TARGET})  {'PASS' if ratio >= TARGET else 'MISS'}")
    if args.json:
        print_json(
            {
                "bench": "store_staging",
                "bytes": size,
                "staged_s": staged,
                "plain_s": plain,
                "ratio": ratio,
                "machine": machine(),
                "load": load,
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
