"""The CLI's words for the node's known refusals: its statement, then the skulk fix."""

from __future__ import annotations

from skulk_cli.client import SkulkApiError
from skulk_cli.hints import explain, place_hint


def test_an_http_fix_is_replaced_by_the_cli_command() -> None:
    error = SkulkApiError(
        404,
        "model 'gemma' is not in the catalog (did you mean 'local/gemma-3-270m-q4_k_m'?); "
        "add it first (POST /models/add)",
        code="model_not_found",
    )

    message, hint = explain(error)

    assert (
        message == "model 'gemma' is not in the catalog (did you mean 'local/gemma-3-270m-q4_k_m'?)"
    )
    assert hint is not None and "skulk models add OWNER/NAME" in hint


def test_a_quant_refusal_points_at_models_quants() -> None:
    error = SkulkApiError(
        400,
        "gguf_file 'x.gguf' is not a GGUF weight file in this revision of the repository; "
        "GET /models/gguf-quants lists the exact names",
        code="invalid_hub_model",
    )

    message, hint = explain(error)

    assert "GET /" not in message and message.startswith("gguf_file 'x.gguf' is not")
    assert hint is not None and "skulk models quants OWNER/NAME" in hint


def test_a_fix_in_plain_words_is_kept_and_unknown_codes_are_untouched() -> None:
    shard = SkulkApiError(
        400,
        "gguf_file 'b.gguf' is a later shard; pin the first shard 'a.gguf'",
        code="invalid_hub_model",
    )
    other = SkulkApiError(400, "something; see GET /x", code="some_other_code")

    assert explain(shard)[0] == shard.message
    assert explain(other) == (other.message, None)


def test_a_misspelled_model_is_not_told_to_be_placed() -> None:

    typo = SkulkApiError(
        404, "No instance found for model gemma (did you mean 'local/gemma-3-270m-q4_k_m'?)"
    )
    unplaced = SkulkApiError(404, "No instance found for model local/gemma-3-270m-q4_k_m")
    assert "skulk place" not in (place_hint(typo, "gemma") or "")
    assert place_hint(unplaced, "local/gemma-3-270m-q4_k_m") == (
        "Place the model first: `skulk place local/gemma-3-270m-q4_k_m`."
    )
    assert place_hint(SkulkApiError(400, "bad"), "x") is None
