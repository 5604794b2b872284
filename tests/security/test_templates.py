"""A card's chat template cannot stall the node or grow without bound."""

from __future__ import annotations

import resource
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
        # Plain loops over strings and lists, outside ``range`` (issue #36: 20 s).
        "{% set s = 'x' * 8000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        "{% set l = ['x'] * 8000 %}{% for a in l %}{% for b in l %}{% endfor %}{% endfor %}",
        "{% set l = [1] * 9000 %}{% for a in l recursive %}{{ loop(l) }}{% endfor %}",
        # Filters and methods that build more than they are given (issue #36: 800 MB).
        "{{ ('x' * 8000)|replace('x', 'x' * 100000) }}",
        "{{ ('x' * 8000).replace('x', 'x' * 100000) }}",
        "{{ (['x'] * 8000)|join('y' * 100000) }}",
        "{{ ('y' * 100000).join(['x'] * 8000) }}",
        "{{ 'x'|center(1000000000) }}",
        "{{ 'x'.rjust(1000000000) }}",
        "{{ ('x\\n' * 10000)|indent(80000) }}",
        "{{ ('x' * 100000)|wordwrap(1, wrapstring='y' * 10000) }}",
        "{{ '%1000000000d'|format(1) }}",
        "{{ '%1000000000d' % 1 }}",
        "{{ '{:>1000000000}'.format(1) }}",
        "{{ [1]|batch(1000000000, 0)|list }}",
        "{{ [1]|slice(1000000000)|list }}",
        "{{ ([[1]] * 100000)|sum(start=[]) }}",
        "{{ {'a': 1}|tojson(indent=1000000000) }}",
        "{{ ['x' * 8000] * 8000 }}",
        # Doubling through a namespace, with ``~`` and ``+``.
        "{% set ns = namespace(s='x' * 4096) %}{% for i in range(40) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% set ns = namespace(s=['x' * 4096]) %}{% for i in range(40) %}"
        "{% set ns.s = ns.s + ns.s %}{% endfor %}",
        # Set blocks and macros join their output away from the rendered stream.
        "{% set s = 'x' * 8000 %}{% set b %}{% for i in range(9000) %}{{ s }}{% endfor %}"
        "{% endset %}",
        "{% set s = 'x' * 8000 %}{% macro m() %}{% for i in range(9000) %}{{ s }}{% endfor %}"
        "{% endmacro %}{% set r = m() %}",
    ],
)
def test_a_hostile_template_fails_its_request_quickly(template: str) -> None:
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(PromptError):
        render_prompt(card(template), ASK)
    elapsed = time.monotonic() - started
    assert elapsed < 5, elapsed
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 100 * 1024, f"the render's peak grew by {grown_kib >> 10} MiB"


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
