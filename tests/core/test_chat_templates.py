from __future__ import annotations

import pytest
from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from skulk_core.models.chat_templates import GEMMA3_CHAT_TEMPLATE


def render(messages: list[dict[str, object]], *, add_generation_prompt: bool = True) -> str:
    # The same environment llama-cpp-python renders chat templates with.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    return env.from_string(GEMMA3_CHAT_TEMPLATE).render(
        messages=messages,
        bos_token="<bos>",
        add_generation_prompt=add_generation_prompt,
        raise_exception=raise_exception,
    )


def test_a_conversation_renders_as_gemma_turns() -> None:
    prompt = render(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": " Hi "},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "Bye"}]},
        ]
    )
    assert prompt == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_no_generation_prompt_ends_after_the_last_turn() -> None:
    prompt = render([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert prompt == "<bos><start_of_turn>user\nHi<end_of_turn>\n"


def test_roles_must_alternate() -> None:
    with pytest.raises(TemplateError, match="alternate"):
        render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
