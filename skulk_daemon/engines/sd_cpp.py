"""Images from stable-diffusion.cpp (``stable-diffusion-cpp-python``), in a runner.

A model is a directory: its diffusion checkpoint (the largest ``.gguf``,
``.safetensors`` or ``.ckpt`` in it) and, when present, a tiny autoencoder (a file
whose name holds ``taesd``) or a separate VAE (``vae``). stable-diffusion.cpp reads the
architecture from the tensors: SD 1.x/2.x (and their tiny UNets, SDXS), SDXL, SD3,
FLUX, Chroma, Qwen-Image, Z-Image and others; a single-file checkpoint of one of those
is what ``skulk models add`` fetches for real pictures.

The engine renders one request at a time (its progress and preview callbacks are
process-wide). NOTE: stable-diffusion.cpp has no way to stop a sampling run, so a
cancelled task stops before its next image, and the API node, which stops waiting at
once, never sees the rest.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from skulk_daemon.engines.base import EngineLoadError

if TYPE_CHECKING:
    from PIL.Image import Image

log = logging.getLogger("skulk.runner")

WEIGHT_SUFFIXES: Final = (".gguf", ".safetensors", ".ckpt")
WARM_UP_SIZE: Final = 64
"""The warm-up render's canvas: the smallest the UNet takes, so loading stays quick."""


class RenderCancelled(Exception):
    """The task was cancelled before its next image."""


class RenderRefused(ValueError):
    """Input the engine cannot use (an unreadable edit image)."""


Preview = Callable[[int, int, bytes], None]
"""Where previews go: (image index, preview number, PNG)."""


def model_files(directory: Path) -> tuple[Path, Path | None, Path | None]:
    """The checkpoint, the tiny autoencoder and the VAE in ``directory``."""
    weights = sorted(
        (path for path in directory.iterdir() if path.suffix in WEIGHT_SUFFIXES),
        key=lambda path: (-path.stat().st_size, path.name),
    )
    taesd = next((path for path in weights if "taesd" in path.name.lower()), None)
    vae = next((path for path in weights if "vae" in path.name.lower() and path != taesd), None)
    main = [path for path in weights if path not in (taesd, vae)]
    if not main:
        raise EngineLoadError(f"no .gguf, .safetensors or .ckpt checkpoint in {directory}")
    return main[0], taesd, vae


def png_bytes(image: Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class StableDiffusionEngine:
    """One loaded checkpoint."""

    def __init__(self, directory: Path, n_threads: int | None) -> None:
        self._directory = directory
        self._threads = n_threads or -1
        self._model: object | None = None
        self.load_seconds = 0.0

    def load(self) -> None:
        try:
            from stable_diffusion_cpp import StableDiffusion  # noqa: PLC0415 (native lib)
        except (ImportError, OSError) as exc:
            raise EngineLoadError(f"cannot load stable-diffusion-cpp-python: {exc}") from None
        checkpoint, taesd, vae = model_files(self._directory)
        started = time.monotonic()
        try:
            self._model = StableDiffusion(
                model_path=str(checkpoint),
                taesd_path=str(taesd) if taesd else "",
                vae_path=str(vae) if vae else "",
                n_threads=self._threads,
                verbose=log.isEnabledFor(logging.DEBUG),
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise EngineLoadError(
                f"stable-diffusion.cpp could not load {checkpoint}: {exc}"
            ) from None
        self.load_seconds = time.monotonic() - started

    def warm_up(self) -> None:
        self.generate(
            prompt="warm up", width=WARM_UP_SIZE, height=WARM_UP_SIZE, seed=0, steps=1, guidance=1.0
        )

    def generate(
        self,
        *,
        prompt: str,
        width: int,
        height: int,
        seed: int,
        steps: int,
        guidance: float,
        negative_prompt: str = "",
        init_image: Image | None = None,
        strength: float = 0.75,
        previews: int = 0,
        on_preview: Callable[[int, bytes], None] | None = None,
    ) -> bytes:
        """One image as PNG."""
        from stable_diffusion_cpp import StableDiffusion  # noqa: PLC0415

        model = self._model
        assert isinstance(model, StableDiffusion), "generate before load"
        sent = 0

        def preview(step: int, frames: list[Image], noisy: bool) -> None:
            nonlocal sent
            if on_preview is None or noisy or not frames or sent >= previews:
                return
            on_preview(sent, png_bytes(frames[0]))
            sent += 1

        interval = max(1, steps // (previews + 1)) if previews else 1
        try:
            images = self._generate(
                model,
                prompt=prompt,
                negative_prompt=negative_prompt,
                width=width,
                height=height,
                guidance=guidance,
                steps=steps,
                seed=seed,
                init_image=init_image,
                strength=strength,
                previews=previews,
                interval=interval,
                preview=preview,
            )
        finally:
            if previews:
                _forget_preview_callback()
        if not images:
            raise RuntimeError("stable-diffusion.cpp returned no image")
        return png_bytes(images[0])

    @staticmethod
    def _generate(
        model: object,
        *,
        prompt: str,
        negative_prompt: str,
        width: int,
        height: int,
        guidance: float,
        steps: int,
        seed: int,
        init_image: Image | None,
        strength: float,
        previews: int,
        interval: int,
        preview: Callable[[int, list[Image], bool], None],
    ) -> list[Image]:
        from stable_diffusion_cpp import StableDiffusion  # noqa: PLC0415

        assert isinstance(model, StableDiffusion)
        images: list[Image] = model.generate_image(
            prompt=prompt,
            negative_prompt=negative_prompt,
            width=width,
            height=height,
            cfg_scale=guidance,
            sample_steps=steps,
            seed=seed,
            batch_count=1,
            init_image=init_image,
            strength=strength,
            preview_method="proj" if previews else "none",
            preview_interval=interval,
            preview_callback=preview if previews else None,
        )
        return images


def _forget_preview_callback() -> None:
    """Clear stable-diffusion.cpp's process-wide preview callback.

    NOTE: the binding registers a ctypes callback for the call and never clears it;
    once the call returns that callback is freed, and the next render (which would
    still preview) jumps into freed memory: SIGSEGV. So a render with previews
    always ends by registering none."""
    from stable_diffusion_cpp import stable_diffusion_cpp as native  # noqa: PLC0415

    native.sd_set_preview_callback(None, 0, 1, True, False, None)


def open_image(data: bytes, width: int, height: int) -> Image:
    """An uploaded edit image as RGB at the render's size."""
    from PIL import Image, UnidentifiedImageError  # noqa: PLC0415

    try:
        picture = Image.open(io.BytesIO(data))
        picture.load()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise RenderRefused(f"the image could not be read: {exc}") from None
    return picture.convert("RGB").resize((width, height))
