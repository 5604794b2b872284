"""One ``/v1/completions`` request: its turns opened on the chat service, as one answer.

Every choice (each prompt, ``n`` times) is a chat turn of its own, opened through
:meth:`ChatService.open_turn`, so it is admitted, routed, batched and reuses
prefixes exactly as chat does. The answer has one command id: a request with one
choice uses its turn's; one with several gets a command of its own whose
cancellation (``POST /v1/cancel/{id}``) cancels every choice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from skulk_core.ids import CommandId, new_command_id
from skulk_daemon.chat.completions_protocol import CompletionRequest
from skulk_daemon.chat.completions_request import choices_per_prompt, prompts, to_tasks
from skulk_daemon.chat.completions_wire import (
    ChoiceTurn,
    CompletionGroup,
    completion_json,
    completion_sse,
)
from skulk_daemon.chat.service import ChatService, OpenedTurn


@dataclass(frozen=True, slots=True)
class OpenedCompletion:
    command_id: CommandId
    _group: CompletionGroup
    _turns: Sequence[OpenedTurn]
    _finish: Callable[[], None]

    def sse(self) -> AsyncIterator[bytes]:
        return self._respond(completion_sse(self._group))

    def json(self) -> AsyncIterator[bytes]:
        return self._respond(completion_json(self._group))

    def _respond(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        for turn in self._turns:
            body = turn.respond(body)
        return self._finishing(body)

    async def _finishing(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            self._finish()
            # NOTE: closed here, not when collected: a client gone mid-answer stops the
            # turns' runner tasks at once.
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()


async def open_completion(chat: ChatService, body: CompletionRequest) -> OpenedCompletion:
    """Admit every choice of ``body`` (an :class:`ApiError` if any is refused)."""
    tasks = to_tasks(body)
    n = choices_per_prompt(body)
    texts = prompts(body)
    turns: list[OpenedTurn] = []
    choices: list[ChoiceTurn] = []
    for prompt_index, task in enumerate(tasks):
        for _ in range(n):
            # NOTE: a turn's generation starts when its events are first read, so a
            # later choice refused here leaves nothing running for the earlier ones.
            turn = await chat.open_turn(task)
            choices.append(
                ChoiceTurn(
                    index=len(turns),
                    prompt_index=prompt_index,
                    events=turn.events,
                    echo=texts[prompt_index] if body.echo else "",
                )
            )
            turns.append(turn)
    first = turns[0].admitted
    command_id, finish = first.command_id, _nothing
    if len(turns) > 1:
        command_id = new_command_id()
        members = [turn.admitted.command_id for turn in turns]
        chat.commands.register(command_id, lambda: _cancel_all(chat, members))
        finish = _finisher(chat, command_id)
    group = CompletionGroup(
        id=command_id,
        created=first.created,
        model=first.model,
        choices=choices,
        logprobs=first.generation.sampling.logprobs,
        include_usage=first.include_usage,
    )
    return OpenedCompletion(command_id=command_id, _group=group, _turns=turns, _finish=finish)


def _nothing() -> None:
    return None


def _cancel_all(chat: ChatService, members: Sequence[CommandId]) -> None:
    for member in members:
        chat.cancel(member)


def _finisher(chat: ChatService, command_id: CommandId) -> Callable[[], None]:
    return lambda: chat.commands.finish(command_id)
