"""`skulk chat`: talk to a placed model, the reply streamed as it is generated."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, render, views
from skulk_cli.client import (
    JsonObject,
    SkulkApiError,
    SkulkClient,
    SkulkUnreachable,
    SseComment,
    UnexpectedResponseError,
)
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client

EXIT_COMMANDS = frozenset({"/exit", "/quit"})
PROMPT = Text("> ", style="bold green")

Message = dict[str, object]


@dataclass(frozen=True)
class Request:
    """What every turn sends besides the conversation."""

    model: str
    max_tokens: int | None = None
    temperature: float | None = None

    def body(self, messages: list[Message]) -> JsonObject:
        body: JsonObject = {"model": self.model, "messages": messages}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body


@dataclass(frozen=True)
class Reply:
    """One assistant turn: its text, and whether it ended well."""

    text: str
    error: str | None = None
    cancelled: bool = False


def chat(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL",
            help="A placed model's id (`skulk instances list` shows them).",
            show_default=False,
        ),
    ],
    prompt: Annotated[
        str | None,
        typer.Argument(
            metavar="PROMPT",
            help="Ask this once and exit; leave it out for an interactive session.",
            show_default=False,
        ),
    ] = None,
    *,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", metavar="N", min=1, help="Stop each reply after N tokens."),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature", metavar="T", min=0.0, help="Sampling temperature (0: greedy)."
        ),
    ] = None,
    system: Annotated[
        str | None,
        typer.Option("--system", metavar="TEXT", help="A system message to start with."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Chat with a placed model; the reply prints as it is generated.

    With PROMPT, answers once and exits (1 if generation failed). Without it,
    starts a session that keeps the conversation: type a message, press Enter;
    Ctrl-C stops the reply being generated, and `/exit`, Ctrl-D or Ctrl-C at the
    prompt ends the session. With `--json` (PROMPT only) prints the whole
    completion as the node returns it instead of streaming.

    Base models, like the demo model, continue text rather than follow
    instructions: completion-style prompts such as "The three primary colours are"
    work best.
    """
    cli = CliContext.of(ctx)
    as_json = cli.wants_json(json_output)
    if as_json and prompt is None:
        raise typer.BadParameter("--json needs a PROMPT", param_hint="'--json'")
    history: list[Message] = [{"role": "system", "content": system}] if system else []
    request = Request(model, max_tokens, temperature)
    with node_client(cli) as client:
        if prompt is None:
            _session(client, request, history)
            return
        body = request.body([*history, {"role": "user", "content": prompt}])
        try:
            if as_json:
                completion = client.chat_completion(body)
                console.emit_json(completion)
                if "error" in completion:
                    raise typer.Exit(EXIT_REFUSED)
                return
            reply = stream_reply(client, body)
        except SkulkApiError as exc:
            console.error(exc.message, hint=_hint(exc, model))
            raise typer.Exit(EXIT_REFUSED) from None
        if reply.cancelled:
            console.error("Stopped.")
            raise typer.Exit(EXIT_REFUSED)
        if reply.error is not None:
            console.error(reply.error)
            raise typer.Exit(EXIT_REFUSED)


def _session(client: SkulkClient, request: Request, history: list[Message]) -> None:
    """Read prompts until /exit, end of input or Ctrl-C; the conversation carries over."""
    console.enable_line_editing()
    model = request.model
    console.note(render.chat_banner(model))
    while True:
        try:
            line = console.ask(PROMPT)
        except (EOFError, KeyboardInterrupt):
            console.note(Text(""))
            return
        if not line.strip():
            continue
        if line.strip() in EXIT_COMMANDS:
            return
        turn: list[Message] = [*history, {"role": "user", "content": line}]
        try:
            reply = stream_reply(client, request.body(turn))
        except SkulkApiError as exc:
            # One refused turn (a prompt too long for the window) is not the end
            # of the session; the turn is simply not kept.
            console.error(exc.message, hint=_hint(exc, model))
            continue
        if reply.cancelled:
            console.note(Text("(stopped; this exchange is left out of the conversation)", "dim"))
            continue
        if reply.error is not None:
            console.error(reply.error)
            continue
        history = [*turn, {"role": "assistant", "content": reply.text}]


def stream_reply(client: SkulkClient, body: JsonObject) -> Reply:
    """Stream one reply to stdout; Ctrl-C cancels it on the node and returns."""
    out = console.TextStream()
    parts: list[str] = []
    stats: views.GenerationStats | None = None
    error: str | None = None
    stream = client.stream_chat(body)
    try:
        with stream:
            try:
                for event in stream:
                    if isinstance(event, SseComment):
                        stats = views.parse_stats(event.text) or stats
                        continue
                    frame = views.parse_chat_event(event.data)
                    if isinstance(frame, views.ErrorFrame):
                        error = frame.error.message or "generation failed"
                        continue  # `[DONE]` follows
                    for choice in frame.choices:
                        if choice.index != 0:
                            continue
                        out.write(choice.delta.reasoning_content or "", style="dim")
                        out.write(choice.delta.content or "")
                        parts.append(choice.delta.content or "")
            except KeyboardInterrupt:
                # Explicitly, rather than only by hanging up: the node frees the
                # runner at once instead of on its next write to a closed socket.
                _cancel(client, stream.command_id)
                raise
    except KeyboardInterrupt:
        out.end_line()
        return Reply("".join(parts), cancelled=True)
    out.end_line()
    if error is None and not stream.done:
        error = f"The reply was cut off: {stream.interruption or 'the stream ended early'}."
    if error is None and stats is not None:
        console.note(render.generation_stats(stats))
    return Reply("".join(parts), error)


def _cancel(client: SkulkClient, command_id: str | None) -> None:
    if command_id is None:
        return
    # Finished meanwhile, or gone: closing the stream cancels it anyway.
    with suppress(SkulkApiError, SkulkUnreachable, UnexpectedResponseError):
        client.cancel(command_id)


def _hint(exc: SkulkApiError, model: str) -> str | None:
    if exc.status == 404:
        return f"Place the model first: `skulk place {model}`."
    return None
