"""A hostile chat template, installed as a card beside real GGUF bytes, is refused by a
real daemon in bounded time and memory (issue #36 finding 6), and the node keeps serving.

The card's template branches on the message, so one placed instance carries every
attack: nested plain loops over strings and lists (once 20 s holding a thread) and
filters that build more than they are given (``|replace`` once allocated 800 MB)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelKind
from skulk_daemon.models.demo import install_demo_model
from skulk_daemon.models.sidecar import write_sidecar
from tests.daemon.serving import place
from tests.daemon_process import DaemonProcess
from tests.security.test_grammar_nesting import peak_rss_bytes

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

HOSTILE = ModelId("test/hostile-template")
TEMPLATE = (
    "{% set m = messages[0].content %}"
    "{% if m == 'strings' %}{% set s = 'x' * 8000 %}"
    "{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
    "{% elif m == 'lists' %}{% set l = ['x'] * 8000 %}"
    "{% for a in l %}{% for b in l %}{% endfor %}{% endfor %}"
    "{% elif m == 'replace' %}{{ ('x' * 8000)|replace('x', 'x' * 100000) }}"
    "{% elif m == 'join' %}{{ (['x'] * 8000)|join('y' * 100000) }}"
    "{% else %}{{ m }}{% endif %}"
)
ATTACKS = ["strings", "lists", "replace", "join"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    models = tmp_path_factory.mktemp("hostile-models")
    demo = install_demo_model(models)
    assert demo is not None and demo.card.gguf_file
    hostile_dir = models / "test--hostile-template"
    hostile_dir.mkdir()
    os.link(Path(demo.location) / demo.card.gguf_file, hostile_dir / demo.card.gguf_file)
    # An instruct card: a base card is served with no template at all.
    card = msgspec.structs.replace(
        demo.card,
        model_id=HOSTILE,
        display_name="hostile template",
        chat_template=TEMPLATE,
        model_kind=ModelKind.INSTRUCT,
    )
    write_sidecar(hostile_dir, card, installed_at=int(time.time()))
    daemon = DaemonProcess(root=tmp_path_factory.mktemp("hostile-node"), models_dir=models)
    daemon.start()
    try:
        place(daemon, model_id=HOSTILE)
        yield daemon
    finally:
        daemon.kill()


def _chat(daemon: DaemonProcess, content: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = httpx.post(
        f"{daemon.url}/v1/chat/completions",
        json={
            "model": HOSTILE,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 2,
        },
        timeout=60,
    )
    return answer, time.monotonic() - started


def test_a_hostile_template_is_refused_in_bounded_time_and_memory(served: DaemonProcess) -> None:
    assert served.process is not None
    peak_before = peak_rss_bytes(served.process.pid)
    for attack in ATTACKS:
        answer, seconds = _chat(served, attack)
        assert answer.status_code == 400, (attack, answer.text)
        assert answer.json()["error"]["code"] == "invalid_messages", answer.text
        print(f"hostile template ({attack}): refused in {seconds:.2f} s")
        assert seconds < 5, (attack, seconds)
    grown = peak_rss_bytes(served.process.pid) - peak_before
    print(f"hostile template: daemon peak RSS {peak_before >> 20} MiB, grew {grown >> 20} MiB")
    assert grown < 100 * 1024 * 1024, f"the daemon's peak RSS grew by {grown >> 20} MiB"
    # The same card still serves an ordinary turn.
    answer, _ = _chat(served, "Count: one, two, three,")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] is not None
