"""A card says how its model is served: ``instruct`` turns through its chat template,
or ``base`` text it continues as written."""

from __future__ import annotations

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import Memory, ModelCard, ModelKind, served_kind
from skulk_core.models.chat_templates import GEMMA3_CHAT_TEMPLATE
from skulk_daemon.chat.prompt import render_prompt
from skulk_daemon.chat.task import TaskMessage

OLDER_CARD = (
    b'{"modelId": "org/m", "storageSize": {"inBytes": 4}, "nLayers": 2, "chatTemplate": "x"}'
)
TURNS = (
    TaskMessage(role="system", content="Sums."),
    TaskMessage(role="user", content="2 + 2 ="),
    TaskMessage(role="assistant", content=" 4"),
    TaskMessage(role="user", content="3 + 3 ="),
)


def card(chat_template: str | None = None, kind: ModelKind = ModelKind.INSTRUCT) -> ModelCard:
    return ModelCard(
        model_id=ModelId("org/m"),
        storage_size=Memory(in_bytes=4),
        n_layers=2,
        chat_template=chat_template,
        model_kind=kind,
    )


def test_a_card_written_before_the_field_is_instruct_with_the_same_wire_and_digest() -> None:
    older = msgspec.json.decode(OLDER_CARD, type=ModelCard)
    assert older.model_kind == ModelKind.INSTRUCT and served_kind(older) == ModelKind.INSTRUCT
    assert b"modelKind" not in msgspec.json.encode(older)
    based = msgspec.structs.replace(older, model_kind=ModelKind.BASE)
    assert b'"modelKind":"base"' in msgspec.json.encode(based)
    assert card_digest(based) != card_digest(older)


def test_a_card_with_no_template_is_served_as_base() -> None:
    assert served_kind(card()) == ModelKind.BASE
    assert served_kind(card("x", ModelKind.BASE)) == ModelKind.BASE


def test_a_base_card_gets_its_turns_as_plain_text_whatever_its_template() -> None:
    base = card(GEMMA3_CHAT_TEMPLATE, ModelKind.BASE)
    # Each turn on a new line; a reply right after the text it continued.
    assert render_prompt(base, TURNS) == "Sums.\n2 + 2 = 4\n3 + 3 ="
    instruct = msgspec.structs.replace(base, model_kind=ModelKind.INSTRUCT)
    assert "<start_of_turn>" in render_prompt(instruct, TURNS[1:2])
    # raw (the completions API): the text as written, even on an instruct card.
    assert render_prompt(instruct, TURNS[1:2], raw=True) == "2 + 2 ="
