"""When a realtime session refuses an update it would otherwise apply: a change of
turn detection mid-utterance, or a response nobody on this node can give."""

from __future__ import annotations

from skulk_core.audio.realtime_config import ConfigRefusal, SessionConfig
from skulk_core.audio.realtime_events import ResponseConfig
from skulk_core.audio.realtime_turns import ServerVad
from skulk_daemon.speech.realtime_session import UpdateRefusal, review_update
from skulk_daemon.speech.realtime_wire import Emit

MANUAL = SessionConfig(model="whisper")
VAD = SessionConfig(model="whisper", turn_detection=ServerVad())
RESPONDING = SessionConfig(model="whisper", response=ResponseConfig(model="chat"))


class _Responder:
    def __init__(self, refusal: ConfigRefusal | None) -> None:
        self._refusal = refusal

    def refuse(self, config: SessionConfig) -> ConfigRefusal | None:
        return self._refusal

    async def respond(self, config: SessionConfig, transcript: str, emit: Emit) -> None:
        return None


def test_turn_detection_changes_only_between_utterances() -> None:
    refusal = review_update(MANUAL, VAD, turn_open=True, responder=None)
    assert refusal is not None
    assert refusal.code == "turn_in_progress"
    assert refusal.param is None
    assert review_update(MANUAL, VAD, turn_open=False, responder=None) is None
    assert review_update(VAD, VAD, turn_open=True, responder=None) is None


def test_a_response_needs_a_participant() -> None:
    assert review_update(MANUAL, RESPONDING, turn_open=False, responder=None) == UpdateRefusal(
        "unsupported_field", "this node has no response participant", "session.response"
    )


def test_the_participant_decides_whether_it_can_respond() -> None:
    no = ConfigRefusal("model_not_found", "no such model", "session.response.model")
    refusal = review_update(MANUAL, RESPONDING, turn_open=False, responder=_Responder(no))
    assert refusal == UpdateRefusal("model_not_found", "no such model", "session.response.model")
    assert review_update(MANUAL, RESPONDING, turn_open=False, responder=_Responder(None)) is None
