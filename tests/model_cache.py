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


def _mlx_key() -> str:
    sources = "".join(
        Path(module.__file__ or "").read_text(encoding="utf-8") for module in (gguf_to_hf, mlx_demo)
    )
    return _key(sources, _version("mlx"), _version("mlx-lm"), _version(DEMO_PACKAGE))


def mlx_demo_model(cache_root: Path, models_dir: Path) -> Path:
    """The MLX demo in ``models_dir`` (its model dir), converted at most once per key."""
    key = _mlx_key()
    home = cache_root / "mlx-demo"
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in home.iterdir():
            if stale.name != ".lock" and not stale.name.startswith(key):
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink(missing_ok=True)
        installed = mlx_demo.install_mlx_demo(home / key)
        assert installed is not None and installed.location is not None, "MLX demo not converted"
        target = models_dir / model_dir_name(mlx_demo.MLX_DEMO_MODEL_ID)
        _link_tree(Path(installed.location), target)
    write_sidecar(target, mlx_demo.mlx_demo_card(target), int(time.time()))
    return target


def mlx_whole_model_text(cache_root: Path, models_dir: Path, prompt: str, tokens: int) -> str:
    """What ``mlx-lm`` generates (greedy) for ``prompt`` with the whole MLX demo in one
    process: the answer a ring must match. Generated at most once per conversion key
    (the same bytes and the same mlx and mlx-lm give the same greedy text) and kept
    beside the conversion, so the ring modules do not each load MLX in the test process
    to ask it again."""
    location = mlx_demo_model(cache_root, models_dir)
    home = cache_root / "mlx-demo"
    kept = home / f"{_mlx_key()}-{_key(prompt, str(tokens))}.txt"
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.is_file():
            from mlx_lm import generate, load  # noqa: PLC0415 - only when not kept

            model, tokenizer = load(str(location))[:2]
            text: str = generate(model, tokenizer, prompt, max_tokens=tokens)
            partial = kept.with_name(kept.name + ".partial")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, kept)
    return kept.read_text(encoding="utf-8")
