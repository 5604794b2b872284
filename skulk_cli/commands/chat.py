"""`skulk chat`: talk to a placed model, the reply streamed as it is generated."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, render_generation, wire_formats
from skulk_cli.client import (
    JsonObject,
    SkulkApiError,
    SkulkClient,
    SkulkUnreachable,
    UnexpectedResponseError,
)
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, PlacedModelArg, node_client
from skulk_cli.hints import place_hint
from skulk_cli.wire_formats import Finish, StreamError, TextDelta, WireFormat

EXIT_COMMANDS = frozenset({"/exit", "/quit"})
DEFAULT_MAX_TOKENS = 256
"""Each reply's cap unless `--max-tokens` says otherwise: a base model continues text
until something stops it, and a reply should end in seconds on a small CPU."""
PROMPT = Text("> ", style="bold green")

Message = dict[str, object]


@dataclass(frozen=True)
class Request:
    """What every turn sends besides the conversation, and in which wire format."""

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    wire_format: WireFormat = WireFormat.OPENAI

    @property
    def route(self) -> wire_formats.Route:
        return wire_formats.ROUTES[self.wire_format]

    def body(self, messages: list[Message], *, stream: bool = True) -> JsonObject:
        return wire_formats.request_body(
            self.wire_format,
            self.model,
            messages,
            stream=stream,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )


@dataclass(frozen=True)
class Reply:
    """One assistant turn: its text, and whether it ended well."""

    text: str
    error: str | None = None
    cancelled: bool = False


TemperatureOption = Annotated[
    float | None,
    typer.Option("--temperature", metavar="T", min=0.0, help="Sampling temperature (0: greedy)."),
]
SystemOption = Annotated[
    str | None,
    typer.Option("--system", metavar="TEXT", help="A system message to start with."),
]


def chat(
    ctx: typer.Context,
    model: PlacedModelArg,
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
        int,
        typer.Option("--max-tokens", metavar="N", min=1, help="Stop each reply after N tokens."),
    ] = DEFAULT_MAX_TOKENS,
    temperature: TemperatureOption = None,
    system: SystemOption = None,
    wire_format: Annotated[
        WireFormat | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="The API to ask through: openai (Chat Completions), claude (Messages), "
            "ollama (chat) or completion (Completions: the text as written). "
            "Default: completion for a base model, openai for any other.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Chat with a placed model; the reply prints as it is generated.

    With PROMPT, answers once and exits (1 if generation failed). Without it,
    starts a session that keeps the conversation: type a message, press Enter;
    Ctrl-C stops the reply being generated, and `/exit`, Ctrl-D or Ctrl-C at the
    prompt ends the session. With `--json` (PROMPT only) prints the whole
    reply as the node returns it instead of streaming.

    `--format` sends the conversation through the node's OpenAI (`/v1/chat/completions`),
    Claude (`/v1/messages`), Ollama (`/ollama/api/chat`) or Completions
    (`/v1/completions`) API. The reply and the summary after it (finish reason in
    OpenAI's words, token counts) look the same for each, which makes it a quick
    check of every API a node serves.

    Base models, like the demo model, continue text rather than follow
    instructions: `skulk chat` sends them the text as written (Completions), so
    prompts such as "2 + 2 =" or "The three primary colours are" work best. Each
    reply stops after `--max-tokens` (256 unless told).
    """
    cli = CliContext.of(ctx)
    as_json = cli.wants_json(json_output)
    if as_json and prompt is None:
        raise typer.BadParameter("--json needs a PROMPT", param_hint="'--json'")
    history: list[Message] = [{"role": "system", "content": system}] if system else []
    with node_client(cli) as client:
        request = Request(model, max_tokens, temperature, wire_format or _format_for(client, model))
        if prompt is None:
            _session(client, request, history)
            return
        turn: list[Message] = [*history, {"role": "user", "content": prompt}]
        try:
            if as_json:
                completion = client.generate(request.route.path, request.body(turn, stream=False))
                console.emit_json(completion)
                if wire_formats.error_message(completion) is not None:
                    raise typer.Exit(EXIT_REFUSED)
                return
            reply = stream_reply(client, request, turn)
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
    continues = request.wire_format == WireFormat.COMPLETION
    console.note(render_generation.chat_banner(model, continues_text=continues))
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
            reply = stream_reply(client, request, turn)
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


def stream_reply(client: SkulkClient, request: Request, messages: list[Message]) -> Reply:
    """Stream one reply to stdout; Ctrl-C cancels it on the node and returns."""
    out = console.TextStream()
    parts: list[str] = []
    end: Finish | StreamError | None = None
    route = request.route
    stream = client.stream(route.path, request.body(messages), route.stream_media_type)
    try:
        with stream:
            try:
                for event in wire_formats.events(request.wire_format, stream):
                    match event:
                        case TextDelta(thinking=True):
                            out.write(event.text, style="dim")
                        case TextDelta():
                            out.write(event.text)
                            parts.append(event.text)
                        case Finish() | StreamError():
                            end = event
            except KeyboardInterrupt:
                # Explicitly, rather than only by hanging up: the node frees the
                # runner at once instead of on its next write to a closed socket.
                _cancel(client, stream.command_id)
                raise
    except KeyboardInterrupt:
        out.end_line()
        return Reply("".join(parts), cancelled=True)
    out.end_line()
    text = "".join(parts)
    match end:
        case Finish():
            console.note(render_generation.reply_summary(end))
            return Reply(text)
        case StreamError(message=message):
            return Reply(text, message)
        case None:
            why = stream.interruption or "the node closed the stream before it finished"
            return Reply(text, f"The reply was cut off: {why}.")


def _cancel(client: SkulkClient, command_id: str | None) -> None:
    if command_id is None:
        return
    # Finished meanwhile, or gone: closing the stream cancels it anyway.
    with suppress(SkulkApiError, SkulkUnreachable, UnexpectedResponseError):
        client.cancel(command_id)


def _format_for(client: SkulkClient, model: str) -> WireFormat:
    """Completions for a model the node serves as a base model, chat for any other
    (and for a model it does not list: the chat route says what is wrong)."""
    try:
        listing = client.models()
    except (SkulkApiError, UnexpectedResponseError):
        return WireFormat.OPENAI
    items = listing.get("data")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("id") == model:
            return WireFormat.COMPLETION if item.get("model_kind") == "base" else WireFormat.OPENAI
    return WireFormat.OPENAI


def _hint(exc: SkulkApiError, model: str) -> str | None:
    return place_hint(exc, model)
