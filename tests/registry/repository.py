"""A TUF repository the tests publish (with the publishing code ``skulk registry
publish`` uses) and serve on loopback with a plain HTTP server."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.advisories import Advisory
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.registry.format import Provenance, encode_catalog
from skulk_core.registry.publish import Lifetimes, RoleKeys, build_repository, generate_keys

REVISION = "0123456789abcdef0123456789abcdef01234567"


def card(model_id: str, **changes: object) -> ModelCard:
    """A complete, valid card (what a registry maintainer would publish)."""
    base = ModelCard(
        model_id=ModelId(model_id),
        storage_size=Memory(in_bytes=1_000_000),
        n_layers=4,
        hidden_size=64,
        source_repository=f"example/{model_id.rsplit('/', maxsplit=1)[-1]}-GGUF",
        source_revision=REVISION,
        gguf_file="model-q4_k_m.gguf",
        architecture="llama",
        context_length=2048,
        num_key_value_heads=2,
        head_dim=32,
        compatible_backends=("llama_cpp",),
        display_name=model_id,
    )
    return msgspec.structs.replace(base, **changes)


class Repository:
    """One repository directory and the keys that sign it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.keys: RoleKeys = generate_keys()[0]
        self.root: bytes | None = None

    def publish(
        self,
        cards: Sequence[ModelCard],
        *,
        version: int,
        advisories: Sequence[Advisory] = (),
        lifetimes: Lifetimes | None = None,
        snapshot_version: int | None = None,
        targets_version: int | None = None,
    ) -> dict[str, bytes]:
        catalog = encode_catalog([(c, Provenance.COMMUNITY) for c in cards], advisories)
        files = build_repository(
            catalog,
            self.keys,
            version=version,
            now=datetime.now(UTC),
            root=self.root,
            lifetimes=lifetimes or Lifetimes(),
            snapshot_version=snapshot_version,
            targets_version=targets_version,
        )
        self.root = files["metadata/root.json"]
        for relative, data in files.items():
            path = self.directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return files

    def target_for(self, *, version: int) -> Path:
        """The catalog target that ``version``'s targets metadata names."""
        targets = json.loads((self.directory / "metadata" / f"{version}.targets.json").read_text())
        digest = targets["signed"]["targets"]["catalog.json"]["hashes"]["sha256"]
        return self.directory / "targets" / f"{digest}.catalog.json"

    def snapshot_state(self) -> Path:
        """A copy of the whole repository as it is now (to serve it again later)."""
        copy = self.directory.with_name(self.directory.name + f"-copy{id(self)}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.directory, copy)
        return copy


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class Server:
    """A plain HTTP server on loopback serving whichever directory it is pointed at."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        def handler(*args: object, **kwargs: object) -> _Quiet:
            return _Quiet(*args, directory=str(self.directory), **kwargs)  # type: ignore[arg-type]

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextmanager
def serving(directory: Path) -> Iterator[Server]:
    server = Server(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
