"""The bundled test media cards: ``foxlight/test-video`` (with
``SKULK_TEST_VIDEO_ENGINE=1``) and ``foxlight/test-music`` (with
``SKULK_TEST_MUSIC_ENGINE=1``). Each is a model directory holding ``engine.json``
(which engine the runner opens) and its card, installed like the other demos on the
node that advertises the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelLicense, ModelTask
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.media_cards import MusicCard, ReferenceLimits, VideoCard
from skulk_daemon.engines.test_media_format import (
    AUDIO_CHANNELS,
    AUDIO_SAMPLE_RATE,
    MUSIC_CHANNELS,
    MUSIC_SAMPLE_RATE,
)
from skulk_daemon.models.packaged import install_once
from skulk_daemon.runner.media_mode import ENGINE_FILE, MediaEngineFile
from skulk_daemon.system import media_settings as settings
from skulk_host.fsutil import atomic_write

TEST_VIDEO_MODEL_ID: Final = ModelId("foxlight/test-video")
TEST_MUSIC_MODEL_ID: Final = ModelId("foxlight/test-music")
APACHE: Final = ModelLicense(name="Apache License 2.0", spdx_id="Apache-2.0")
TEST_ENGINE_BYTES: Final = 64 * 1024**2
"""What a test engine's runner is charged for placement: a token, not zero."""

TEST_VIDEO_CARD: Final = VideoCard(
    modes=("t2va", "fl2va", "ref2va"),
    min_seconds=1,
    max_seconds=4,
    fps=8,
    frame_grid_multiple=1,
    canvas_multiple=16,
    default_short_edge=64,
    max_pixels=256 * 256,
    aspect_ratios=("16:9", "9:16", "1:1"),
    audio_output=True,
    audio_sample_rate=AUDIO_SAMPLE_RATE,
    audio_channels=AUDIO_CHANNELS,
    default_steps=4,
    reference_limits=ReferenceLimits(images=4, videos=1, audio=1),
    samplers=("synthetic",),
    default_sampler="synthetic",
    schedulers=("simple",),
    default_scheduler="simple",
    codecs=("mjpeg",),
    default_codec="mjpeg",
)


def _card(model_id: ModelId, task: ModelTask, backend: str, name: str) -> ModelCard:
    return ModelCard(
        model_id=model_id,
        storage_size=Memory(in_bytes=TEST_ENGINE_BYTES),
        # One unit: a media model is never split across nodes.
        n_layers=1,
        tasks=(task,),
        compatible_backends=(backend,),
        display_name=name,
        license=APACHE,
        video=TEST_VIDEO_CARD if task == ModelTask.TEXT_TO_VIDEO else None,
        music=(
            MusicCard(
                family="skulk-test",
                lyrics="optional",
                min_seconds=1,
                max_seconds=120,
                sample_rate=MUSIC_SAMPLE_RATE,
                channels=MUSIC_CHANNELS,
            )
            if task == ModelTask.TEXT_TO_MUSIC
            else None
        ),
    )


def with_media_test_cards(
    installed: list[InstalledModel], models_dir: Path
) -> list[InstalledModel]:
    """``installed`` plus each test media card whose engine this node runs."""
    have = {model.card.model_id for model in installed}
    added = list(installed)
    wanted = []
    if settings.test_video_engine():
        wanted.append(
            (
                _card(
                    TEST_VIDEO_MODEL_ID,
                    ModelTask.TEXT_TO_VIDEO,
                    settings.BACKEND_TEST_VIDEO,
                    "Test video engine (synthetic clips)",
                ),
                MediaEngineFile(engine="skulk-test-video"),
            )
        )
    if settings.test_music_engine():
        wanted.append(
            (
                _card(
                    TEST_MUSIC_MODEL_ID,
                    ModelTask.TEXT_TO_MUSIC,
                    settings.BACKEND_TEST_MUSIC,
                    "Test music engine (synthetic WAV)",
                ),
                MediaEngineFile(engine="skulk-test-music"),
            )
        )
    for card, engine in wanted:
        if card.model_id in have:
            continue

        def install(
            model_dir: Path, card: ModelCard = card, engine: MediaEngineFile = engine
        ) -> ModelCard:
            model_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(model_dir / ENGINE_FILE, msgspec.json.encode(engine))
            return card

        model = install_once(
            models_dir, card.model_id, card.display_name or "", install, artifact=ENGINE_FILE
        )
        if model is not None:
            added.append(model)
    return added
