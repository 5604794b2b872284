"""A generation's output budget when the request names none: the base card's small
default, else the shared one (``inference.max_output_tokens``, the environment's
``SKULK_MAX_OUTPUT_TOKENS`` first)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from skulk_core.config import InferenceConfig, SkulkConfig
from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard
from skulk_daemon.chat import admission

BASE = ModelCard(model_id=ModelId("local/base"), storage_size=Memory(in_bytes=1), n_layers=1)
INSTRUCT = msgspec.structs.replace(
    BASE, model_id=ModelId("local/instruct"), chat_template="{{ messages }}"
)


def budget(card: ModelCard, *, asked: int | None = None, **inference: Any) -> int:
    node: Any = SimpleNamespace(config=SkulkConfig(inference=InferenceConfig(**inference)))
    task: Any = SimpleNamespace(max_tokens=asked)
    return admission._output_budget(node, task, card)


def test_the_budget_a_request_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SKULK_MAX_OUTPUT_TOKENS", "SKULK_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    assert budget(INSTRUCT) == admission.DEFAULT_MAX_OUTPUT_TOKENS
    assert budget(INSTRUCT, max_output_tokens=300) == 300
    assert budget(BASE, max_output_tokens=300) == 256  # a base card keeps its own
    assert budget(BASE, default_max_tokens=40) == 40
    assert budget(INSTRUCT, asked=7, max_output_tokens=300) == 7
    monkeypatch.setenv("SKULK_MAX_OUTPUT_TOKENS", "900")
    assert budget(INSTRUCT, max_output_tokens=300) == 900
