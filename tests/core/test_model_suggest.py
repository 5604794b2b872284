"""Did-you-mean for model ids: close typos are suggested, unrelated ids are not."""

from __future__ import annotations

from skulk_core.models.suggest import did_you_mean, not_in_catalog

KNOWN = [
    "local/gemma-3-270m-q4_k_m",
    "local/all-minilm-l6-v2",
    "local/whisper-tiny.en",
    "local/piper-en-us-joe-medium",
    "mlx-community/Qwen3.5-9B-4bit",
]


def test_typos_case_and_bare_names_find_the_id() -> None:
    assert did_you_mean("local/gemma-3-270m-q4km", KNOWN) == ["local/gemma-3-270m-q4_k_m"]
    assert did_you_mean("gemma-3-270m", KNOWN) == ["local/gemma-3-270m-q4_k_m"]
    assert did_you_mean("gemma", KNOWN) == ["local/gemma-3-270m-q4_k_m"]
    assert did_you_mean("MLX-Community/qwen3.5-9b-4bit", KNOWN) == ["mlx-community/Qwen3.5-9B-4bit"]
    assert did_you_mean("whisper", KNOWN) == ["local/whisper-tiny.en"]


def test_nothing_close_suggests_nothing() -> None:
    assert did_you_mean("nobody/nothing", KNOWN) == []
    assert did_you_mean("  ", KNOWN) == []
    assert not_in_catalog("nobody/nothing", KNOWN) == "model 'nobody/nothing' is not in the catalog"


def test_the_message_lists_up_to_three_closest() -> None:
    many = [f"org/model-{n}" for n in range(10)]
    message = not_in_catalog("org/model-", many)
    assert message.startswith("model 'org/model-' is not in the catalog (did you mean ")
    assert message.count("'org/model-") == 4 and " or " in message
