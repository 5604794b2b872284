"""Models the suite converts (minutes of CPU), made once per checkout and linked in.

A conversion is kept under ``.pytest_cache/<name>/<key>`` (ignored by git), where the key
hashes what decides its bytes (the converter's sources, the library versions, the demo
package), so a change to any of them converts again and the stale copy goes. Two xdist
workers (or two runs) never convert at once: the second waits on the lock and links.
Each session's models dir gets hard links to the weights and a card record of its own,
so a test that removes or re-records the model never touches the cached copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import time
from pathlib import Path

from skulk_daemon.models import gguf_to_hf, mlx_demo
from skulk_daemon.models.demo import DEMO_PACKAGE
from skulk_daemon.models.sidecar import SIDECAR_DIR, model_dir_name, write_sidecar


def _key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link every file of ``source`` (its card record dir left out) into ``target``."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if relative.parts[0] == SIDECAR_DIR or not path.is_file():
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if destination.exists():
            continue
        partial = destination.with_name(destination.name + ".partial")
        try:
            os.link(path, partial)
        except OSError:  # another filesystem: a copy
            shutil.copyfile(path, partial)
        os.replace(partial, destination)


def mlx_demo_model(cache_root: Path, models_dir: Path) -> Path:
    """The MLX demo in ``models_dir`` (its model dir), converted at most once per key."""
    sources = "".join(
        Path(module.__file__ or "").read_text(encoding="utf-8") for module in (gguf_to_hf, mlx_demo)
    )
    key = _key(sources, _version("mlx"), _version("mlx-lm"), _version(DEMO_PACKAGE))
    home = cache_root / "mlx-demo"
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in home.iterdir():
            if stale.is_dir() and stale.name != key:
                shutil.rmtree(stale, ignore_errors=True)
        installed = mlx_demo.install_mlx_demo(home / key)
        assert installed is not None and installed.location is not None, "MLX demo not converted"
        target = models_dir / model_dir_name(mlx_demo.MLX_DEMO_MODEL_ID)
        _link_tree(Path(installed.location), target)
    write_sidecar(target, mlx_demo.mlx_demo_card(target), int(time.time()))
    return target
