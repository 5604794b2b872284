"""A card's chat template cannot stall the node or grow without bound."""

from __future__ import annotations

import time

import pytest

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.models.chat_templates import GEMMA3_CHAT_TEMPLATE
from skulk_daemon.chat.prompt import MAX_PROMPT_CHARS, PromptError, render_prompt
from skulk_daemon.chat.task import TaskMessage

pytestmark = pytest.mark.xdist_group("timing")

ASK = [TaskMessage(role="user", content="Count: one, two, three,")]


def card(template: str) -> ModelCard:
    return ModelCard(
        model_id=ModelId("test/template"),
        storage_size=Memory(in_bytes=1),
        n_layers=1,
        chat_template=template,
    )


@pytest.mark.parametrize(
    "template",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% for i in range(9000) %}{% for j in range(9000) %}{% endfor %}{% endfor %}",
        "{{ 'x' * 1000000000 }}",
        "{{ ['x'] * 1000000000 }}",
        "{{ 10 ** 10000000 }}",
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
        "{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}",
    ],
)
def test_a_hostile_template_fails_its_request_quickly(template: str) -> None:
    started = time.monotonic()
    with pytest.raises(PromptError):
        render_prompt(card(template), ASK)
    assert time.monotonic() - started < 5


def test_the_bound_is_the_rendered_size() -> None:
    assert MAX_PROMPT_CHARS >= 1024 * 1024
    # Output is counted as it streams: a template just past the bound is refused, one
    # just under it renders.
    chunk = MAX_PROMPT_CHARS // 8
    under = "{% for i in range(8) %}{{ 'x' * " + str(chunk) + " }}{% endfor %}"
    assert len(render_prompt(card(under), ASK)) == 8 * chunk
    with pytest.raises(PromptError):
        render_prompt(card(under + "y"), ASK)


def test_real_templates_still_render() -> None:
    prompt = render_prompt(card(GEMMA3_CHAT_TEMPLATE), ASK)
    assert "Count: one, two, three," in prompt
    assert render_prompt(card("{% for i in range(3) %}{{ i }}{% endfor %}"), ASK) == "012"
