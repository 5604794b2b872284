"""Piper voices with onnxruntime: text to mono 16-bit PCM.

A Piper voice is a VITS model exported to ONNX plus a JSON config whose
``phoneme_id_map`` maps each IPA symbol to model input ids. Phonemes come from
Debian's ``espeak-ng`` program, run as a separate process on a pipe (espeak-ng is
GPL-3.0: it is never imported or linked into Skulk's processes).

Text is split into sentences, each synthesized on its own (as Piper does: a VITS
voice keeps its prosody within a sentence), with a short silence between them.
Clause punctuation is kept in the phonemes so the voice pauses where the text does.
Cancellation takes effect between sentences.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import onnxruntime  # type: ignore[import-untyped]

from skulk_daemon.engines.base import EngineLoadError

log = logging.getLogger(__name__)

ESPEAK_PROGRAM: Final = "espeak-ng"
ESPEAK_TIMEOUT_SECONDS: Final = 30.0
SENTENCE_SILENCE_SECONDS: Final = 0.2
WARM_UP_TEXT: Final = "Hello."
_PAD: Final = "_"
_BOS: Final = "^"
_EOS: Final = "$"
_SENTENCE: Final = re.compile(r"[^.!?]+[.!?]*")
_CLAUSE: Final = re.compile(r"([^.,;:!?]+)([.,;:!?]*)")


class SynthesisCancelled(Exception):
    """The caller cancelled between sentences."""


class SynthesisRefused(ValueError):
    """Text this voice cannot speak; the message is safe to show a user."""


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` in order, each with its own terminal punctuation."""
    return [part.strip() for part in _SENTENCE.findall(text) if part.strip(" \t\n.!?")]


@dataclass(frozen=True, slots=True)
class PiperConfig:
    sample_rate: int
    espeak_voice: str
    noise_scale: float
    length_scale: float
    noise_w: float
    phoneme_ids: dict[str, list[int]]

    @classmethod
    def read(cls, path: Path) -> PiperConfig:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("phoneme_type", "espeak") != "espeak":
            raise EngineLoadError(f"{path.name}: only espeak phoneme voices are supported")
        inference = raw.get("inference", {})
        return cls(
            sample_rate=int(raw["audio"]["sample_rate"]),
            espeak_voice=str(raw.get("espeak", {}).get("voice", "en-us")),
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            phoneme_ids={str(k): list(v) for k, v in raw["phoneme_id_map"].items()},
        )


def espeak_phonemes(clauses: list[str], voice: str) -> list[str]:
    """One IPA line per clause, from the ``espeak-ng`` program (one process)."""
    # NOTE: each clause is its own line ending in a full stop, so espeak-ng answers
    # one line per clause; the real punctuation is put back by the caller.
    body = "\n".join(f"{clause}." for clause in clauses)
    try:
        done = subprocess.run(
            [ESPEAK_PROGRAM, "-q", "--ipa", "-b", "1", "-v", voice],
            input=body.encode("utf-8"),
            capture_output=True,
            timeout=ESPEAK_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SynthesisRefused(f"espeak-ng could not phonemize the text: {exc}") from None
    if done.returncode != 0:
        raise SynthesisRefused(f"espeak-ng exited with status {done.returncode}")
    return [line.strip() for line in done.stdout.decode("utf-8").splitlines() if line.strip()]


class PiperVoice:
    """One loaded voice. Not thread-safe: one caller at a time."""

    def __init__(self, session: onnxruntime.InferenceSession, config: PiperConfig) -> None:
        self._session = session
        self.config = config
        self.sample_rate = config.sample_rate

    @classmethod
    def open(cls, model_dir: Path, n_threads: int | None = None) -> PiperVoice:
        models = sorted(model_dir.glob("*.onnx"))
        if len(models) != 1:
            raise EngineLoadError(f"{model_dir} must hold exactly one .onnx voice")
        config_path = models[0].with_name(models[0].name + ".json")
        if not config_path.is_file():
            raise EngineLoadError(f"the voice config {config_path.name} is missing")
        if shutil.which(ESPEAK_PROGRAM) is None:
            raise EngineLoadError(
                "the espeak-ng program is not installed (Piper voices need its phonemes; "
                "install it with your package manager, e.g. apt install espeak-ng)"
            )
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = n_threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(
                str(models[0]), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise EngineLoadError(f"onnxruntime cannot load {models[0].name}: {exc}") from None
        try:
            config = PiperConfig.read(config_path)
        except (KeyError, ValueError, TypeError) as exc:
            raise EngineLoadError(
                f"{config_path.name} is not a Piper voice config: {exc}"
            ) from None
        return cls(session, config)

    def phoneme_ids(self, sentence: str) -> list[int]:
        """The model's input ids for one sentence: BOS, each phoneme padded, EOS."""
        # NOTE: whitespace (a newline above all) is folded, so each clause is one line.
        parts = [(" ".join(c.split()), p) for c, p in _CLAUSE.findall(sentence) if c.strip()]
        if not parts:
            return []
        lines = espeak_phonemes([clause for clause, _ in parts], self.config.espeak_voice)
        if len(lines) == len(parts):
            phonemes = " ".join(
                line + punct[:1] for line, (_, punct) in zip(lines, parts, strict=True)
            )
        else:
            phonemes = " ".join(lines) + parts[-1][1][:1]
        table = self.config.phoneme_ids
        ids = [*table[_BOS], *table[_PAD]]
        for symbol in phonemes:
            mapped = table.get(symbol)
            if mapped is None:
                continue  # espeak-ng emits a few symbols the voice was not trained on
            ids.extend(mapped)
            ids.extend(table[_PAD])
        ids.extend(table[_EOS])
        return ids

    def synthesize(
        self,
        text: str,
        speed: float = 1.0,
        cancelled: Callable[[], bool] = lambda: False,
        on_sentence: Callable[[bytes], None] | None = None,
        *,
        deterministic: bool = False,
    ) -> tuple[bytes, int]:
        """(PCM s16le mono, sentence count) for ``text``; raises
        :class:`SynthesisCancelled` when ``cancelled()`` turns true between sentences.

        With ``on_sentence``, each sentence's PCM (after the silence that separates it
        from the one before) goes there as soon as it is spoken, and the PCM returned
        is empty.

        ``deterministic`` synthesizes without the voice's noise (``noise_scale`` and
        ``noise_w`` 0): the graph samples its noise inside onnxruntime, which cannot be
        reseeded, so this is how a request with a seed is made reproducible."""
        if speed <= 0:
            raise SynthesisRefused(f"speed must be positive, got {speed}")
        sentences = split_sentences(text)
        if not sentences:
            raise SynthesisRefused("the input holds nothing to speak")
        silence = np.zeros(int(self.sample_rate * SENTENCE_SILENCE_SECONDS), dtype=np.float32)
        pieces: list[npt.NDArray[np.float32]] = []
        spoken = 0
        for sentence in sentences:
            if cancelled():
                raise SynthesisCancelled
            ids = self.phoneme_ids(sentence)
            if len(ids) <= 3:
                continue
            sentence_audio = self._infer(ids, speed, deterministic)
            if spoken:
                sentence_audio = np.concatenate([silence, sentence_audio])
            spoken += 1
            if on_sentence is not None:
                on_sentence(_pcm(sentence_audio))
            else:
                pieces.append(sentence_audio)
        if not spoken:
            raise SynthesisRefused("the input holds nothing to speak")
        return (_pcm(np.concatenate(pieces)) if pieces else b""), spoken

    def _infer(self, ids: list[int], speed: float, deterministic: bool) -> npt.NDArray[np.float32]:
        config = self.config
        noise, noise_w = (0.0, 0.0) if deterministic else (config.noise_scale, config.noise_w)
        scales = np.array([noise, config.length_scale / speed, noise_w], dtype=np.float32)
        (audio,) = self._session.run(
            None,
            {
                "input": np.array([ids], dtype=np.int64),
                "input_lengths": np.array([len(ids)], dtype=np.int64),
                "scales": scales,
            },
        )[:1]
        return np.asarray(audio, dtype=np.float32).reshape(-1)


def _pcm(audio: npt.NDArray[np.float32]) -> bytes:
    """Float samples in [-1, 1] as signed 16-bit little-endian PCM."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
