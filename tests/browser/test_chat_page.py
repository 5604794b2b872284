"""The Chat page in a real browser against a real daemon with the demo chat, TTS (piper)
and STT (whisper) models placed: a streamed reply that survives a reload, conversations
switched and deleted, a failed request shown with a Retry that succeeds, Stop cancelling
a stream, a draft spoken as audio, and a fake microphone (Chromium playing a WAV the demo
TTS spoke) transcribed into the draft over the realtime and the batch path."""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from playwright.sync_api import Browser, FilePayload, Locator, Page, Playwright, Route, expect

from tests.browser.conftest import (
    CHROMIUM,
    Tab,
    named,
    new_context,
    screenshot,
    watched,
)
from tests.daemon.serving import DEMO, place
from tests.daemon_process import DaemonProcess
from tests.speech.test_speech_api import STT, TTS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

SPOKEN: Final = "The quick brown fox jumps over the lazy dog."
PROMPT: Final = "Count: one, two, three,"
"""A completion-style prompt: the demo is a base model (its text is never asserted)."""
REPLY_MS: Final = 300_000
"""A reply on a CPU runner under a loaded suite: generous, and only waited on, never slept."""
SHORT: Final = "8"
"""Max tokens for a reply a test waits to finish (a shared CPU makes tokens slow)."""
SPEAKING_MS: Final = 4_000
"""How long the test holds the microphone open: the fake device plays the WAV meanwhile
(a person speaking; there is no page state to wait on while they do)."""


@pytest.fixture(scope="module")
def talker(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One daemon serving the demo chat model and the demo speech models."""
    daemon = named(
        DaemonProcess(root=tmp_path_factory.mktemp("browser-chat"), models_dir=shared_models_dir),
        "talker",
    )
    daemon.start()
    try:
        place(daemon, context=2048)
        place(daemon, model_id=TTS)
        place(daemon, model_id=STT)
        yield daemon
    finally:
        daemon.kill()


@pytest.fixture(scope="module")
def speech_wav(talker: DaemonProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WAV of SPOKEN, made by the demo TTS: what the fake microphone says."""
    response = httpx.post(
        f"{talker.url}/v1/audio/speech",
        json={"model": TTS, "input": SPOKEN, "response_format": "wav"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    path = tmp_path_factory.mktemp("fake-mic") / "speech.wav"
    path.write_bytes(response.content)
    return path


@pytest.fixture(scope="module")
def mic_browser(playwright: Playwright, speech_wav: Path) -> Iterator[Browser]:
    """Chromium with a fake microphone that plays ``speech_wav`` (looping) and media
    permission granted, as a user who allowed the microphone."""
    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={speech_wav}",
            "--autoplay-policy=no-user-gesture-required",
        ],
    )
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def chat(mic_browser: Browser, talker: DaemonProcess) -> Iterator[Tab]:
    # NOTE: a context of its own for each test, not the module's reused page the other
    # modules take turns on: these tests stream replies and media and replay the wire
    # format through routes. (The Chat page's module once failed to load on a reused
    # page: ERR_NETWORK_CHANGED from another worker's LAN, which conftest now reruns.)
    context = new_context(mic_browser)
    context.grant_permissions(["microphone"], origin=talker.url)
    try:
        with watched(context.new_page()) as tab:
            tab.page.goto(f"{talker.url}/chat")
            expect(tab.page.get_by_label("Select chat model")).to_have_value(DEMO)
            yield tab
            # A test's routes may be mid-fetch (the page polls /v1/models): let them go.
            tab.page.unroute_all(behavior="ignoreErrors")
    finally:
        context.close()


def send(page: Page, text: str, max_tokens: str = SHORT) -> Locator:
    """Types and sends ``text``; returns the reply's article (the last assistant one)."""
    page.get_by_label("Max tokens").fill(max_tokens)
    page.get_by_label("Chat message").fill(text)
    page.get_by_role("button", name="Send message").click()
    return page.get_by_role("article", name="Assistant message").last


def finished(page: Page) -> None:
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=REPLY_MS)
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()


def count_streamed_pieces(page: Page) -> None:
    """Counts, in the page, each piece of text added to an assistant message."""
    page.evaluate(
        """() => {
          window.__pieces = 0;
          new MutationObserver((records) => {
            for (const r of records) for (const n of r.addedNodes)
              if (n.nodeType === Node.TEXT_NODE
                  && n.parentElement?.closest('[aria-label="Assistant message"]'))
                window.__pieces += 1;
          }).observe(document.querySelector('[role="log"]'), { childList: true, subtree: true });
        }"""
    )


def test_a_reply_streams_in_and_survives_a_reload(chat: Tab, talker: DaemonProcess) -> None:
    page = chat.page
    select = page.get_by_label("Select chat model")
    expect(select.locator("option")).to_have_count(1)  # only the ready text model
    assert page.get_by_label("Chat message").get_attribute("placeholder") == f"Message {DEMO}"
    # The demo model declares no vision: no attachment control.
    expect(page.get_by_role("button", name="Attach file")).to_be_hidden()
    count_streamed_pieces(page)
    with page.expect_response("**/v1/chat/completions") as answered:
        reply = send(page, PROMPT)
    assert answered.value.headers["content-type"].startswith("text/event-stream")
    expect(page.get_by_role("article", name="User message")).to_have_text(re.compile(PROMPT))
    finished(page)
    text = reply.locator(".chat-text").inner_text()
    assert text.strip(), "the reply is empty"
    assert page.evaluate("window.__pieces") >= 2, "the reply arrived in one piece, not streamed"
    screenshot(page, "chat")

    page.reload()
    expect(page.get_by_role("article", name="User message")).to_have_text(re.compile(PROMPT))
    reply = page.get_by_role("article", name="Assistant message")
    expect(reply.locator(".chat-text")).to_have_text(text)
    conversations = page.get_by_role("list", name="Conversations")
    expect(conversations.get_by_role("button", name=PROMPT, exact=True)).to_be_visible()

    # A second conversation, then back to the first, then the second deleted.
    page.get_by_role("button", name="+ New").click()
    expect(page.get_by_role("article")).to_have_count(0)
    page.get_by_label("Chat message").fill("Draft kept out of history")
    conversations.get_by_role("button", name=PROMPT, exact=True).click()
    expect(page.get_by_role("article", name="Assistant message")).to_have_count(1)
    page.get_by_role("button", name="Delete conversation New conversation").click()
    expect(conversations.get_by_role("listitem")).to_have_count(1)
    page.get_by_role("button", name=f"Delete conversation {PROMPT}").click()
    expect(page.get_by_text("No conversations yet.")).to_be_visible()
    page.reload()
    expect(page.get_by_text("No conversations yet.")).to_be_visible()
    assert chat.console.errors == []


def test_a_failed_request_shows_why_and_retry_succeeds(chat: Tab) -> None:
    page = chat.page

    def unplaced_model(route: Route) -> None:
        # The cause: the request names a model nothing serves (the server's real refusal).
        body = json.loads(route.request.post_data or "{}")
        route.continue_(post_data=json.dumps({**body, "model": "local/nothing-placed"}))

    page.route("**/v1/chat/completions", unplaced_model)
    send(page, PROMPT)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("The reply failed")
    expect(page.get_by_role("article", name="Assistant message")).to_have_count(0)
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()

    page.unroute("**/v1/chat/completions")  # the cause fixed
    alert.get_by_role("button", name="Retry").click()
    expect(page.get_by_role("alert")).to_have_count(0)
    reply = page.get_by_role("article", name="Assistant message")
    expect(reply).to_have_count(1)
    finished(page)
    assert reply.locator(".chat-text").inner_text().strip()
    # One user message: Retry resent it, it did not add another.
    expect(page.get_by_role("article", name="User message")).to_have_count(1)


def test_stop_ends_the_stream_and_cancels_it(chat: Tab) -> None:
    page = chat.page
    reply = send(page, "Once upon a time, in a land far away,", max_tokens="1000")
    expect(reply.locator(".chat-text")).not_to_have_text("", timeout=REPLY_MS)
    with page.expect_request(re.compile(r"/v1/cancel/")) as cancelled:
        page.get_by_role("button", name="Stop").click()
    assert cancelled.value.method == "POST"
    expect(reply).to_contain_text("Stopped.")
    finished(page)
    page.reload()
    expect(page.get_by_role("article", name="Assistant message")).to_contain_text("Stopped.")


def test_speak_draft_plays_the_audio(chat: Tab) -> None:
    page = chat.page
    expect(page.get_by_label("Select speech model")).to_have_value(TTS)
    page.get_by_label("Chat message").fill("Hello from the dashboard.")
    with page.expect_response("**/v1/audio/speech") as spoken:
        page.get_by_role("button", name="Speak draft").click()
    assert spoken.value.status == 200
    assert spoken.value.headers["content-type"].startswith("audio/")
    player = page.get_by_label("Speech playback")
    expect(player).to_have_attribute("src", re.compile(r"^blob:"))
    page.wait_for_function(
        "() => { const a = document.querySelector('audio'); return a.currentTime > 0 || a.ended; }"
    )
    # Auto speaks a finished reply.
    page.get_by_label("Auto").check()
    with page.expect_response("**/v1/audio/speech", timeout=REPLY_MS) as auto:
        send(page, PROMPT)
    assert auto.value.status == 200
    assert chat.console.errors == []


def hold_the_microphone(page: Page) -> None:
    page.get_by_role("button", name="Start recording").click()
    expect(page.get_by_role("button", name="Stop recording")).to_be_visible()
    page.wait_for_timeout(SPEAKING_MS)
    page.get_by_role("button", name="Stop recording").click()


def test_the_microphone_is_transcribed_live(chat: Tab) -> None:
    page = chat.page
    expect(page.get_by_label("Select transcription model")).to_have_value(STT)
    with page.expect_websocket(lambda ws: "/v1/realtime" in ws.url):
        page.get_by_role("button", name="Start recording").click()
    expect(page.get_by_text("Recording (live transcript)…")).to_be_visible()
    page.wait_for_timeout(SPEAKING_MS)
    page.get_by_role("button", name="Stop recording").click()
    expect(page.get_by_label("Chat message")).to_have_value(re.compile("fox", re.I), timeout=60_000)
    expect(page.get_by_text("Transcript added to the draft.")).to_be_visible()
    assert chat.console.errors == []


def test_the_microphone_falls_back_to_batch_transcription(chat: Tab) -> None:
    page = chat.page
    # A node that does not advertise stt.realtime: the page records and uploads.
    page.route(
        "**/v1/capabilities",
        lambda route: route.fulfill(json={"capabilities": [], "revisions": {}}),
    )
    page.get_by_label("Max tokens").fill(SHORT)
    page.get_by_label("Send when transcribed").check()
    with page.expect_response("**/v1/audio/transcriptions", timeout=60_000) as heard:
        hold_the_microphone(page)
    assert heard.value.status == 200
    # The transcript went out as the user's message, as if typed and sent.
    expect(page.get_by_role("article", name="User message")).to_have_text(re.compile("fox", re.I))
    expect(page.get_by_label("Chat message")).to_have_value("")
    finished(page)


def test_the_page_fits_a_phone(chat: Tab) -> None:
    page = chat.page
    page.set_viewport_size({"width": 390, "height": 844})
    # The nav folds into Menu and every page stays one tap away.
    menu = page.get_by_role("button", name="Menu")
    menu.click()
    nav = page.get_by_role("navigation", name="Main")
    for name in ("Cluster", "Models", "Chat", "Downloads", "Traces", "Performance", "Plugins"):
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_in_viewport()
    expect(nav.get_by_role("button", name="Settings")).to_be_in_viewport()
    menu.click()
    expect(nav.get_by_role("link", name="Cluster", exact=True)).to_be_hidden()
    for name in ("Send message", "+ New", "Speak draft", "Start recording"):
        expect(page.get_by_role("button", name=name)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.get_by_label("Max tokens").fill(SHORT)
    page.get_by_label("Chat message").focus()
    page.keyboard.type(PROMPT)
    page.keyboard.press("Enter")  # Enter sends; Shift+Enter would add a line
    expect(page.get_by_role("article", name="User message")).to_have_count(1)
    finished(page)
    screenshot(page, "chat-phone")


def test_reasoning_shows_apart_from_the_reply(chat: Tab) -> None:
    # The demo model does not reason, so this stream is the node's wire format replayed:
    # what a thinking model sends (reasoning_content deltas, then content).
    def chunk(delta: dict[str, str], finish: str | None = None) -> str:
        body = {
            "id": "cmd-reasoning",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": DEMO,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    stream = (
        ": command_id cmd-reasoning\n\n"
        + chunk({"role": "assistant", "reasoning_content": "The user counts; "})
        + chunk({"reasoning_content": "four comes next."})
        + chunk({"content": " four,"})
        + chunk({"content": " five"}, finish="stop")
        + "data: [DONE]\n\n"
    )
    page = chat.page
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(
            status=200,
            headers={"Content-Type": "text/event-stream", "X-Skulk-Command-Id": "cmd-reasoning"},
            body=stream,
        ),
    )
    reply = send(page, PROMPT)
    finished(page)
    expect(reply.locator(".chat-text")).to_have_text(" four, five")
    thoughts = reply.get_by_role("group")
    expect(thoughts).to_contain_text("four comes next.")
    summary = thoughts.get_by_text("Reasoning")
    summary.click()  # collapsible: a <details> the person opens and closes
    expect(thoughts.get_by_text("four comes next.")).to_be_visible()
    summary.click()
    expect(thoughts.get_by_text("four comes next.")).to_be_hidden()
    # The reasoning is kept apart in the saved conversation too.
    page.reload()
    expect(
        page.get_by_role("article", name="Assistant message").get_by_role("group")
    ).to_contain_text("four comes next.")


def one_pixel_png() -> bytes:
    def part(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xc4\x50\x2a")
    return b"\x89PNG\r\n\x1a\n" + part(b"IHDR", header) + part(b"IDAT", pixels) + part(b"IEND", b"")


def as_vision(route: Route) -> None:
    """The real catalog answer with the demo model declaring vision, as a vision card's
    would (the demo model itself sees nothing)."""
    listing = route.fetch().json()
    for item in listing["data"]:
        if item["id"] == DEMO:
            item["resolved_capabilities"]["supports_vision"] = True
    route.fulfill(json=listing)


def test_an_image_is_attached_for_a_vision_model(chat: Tab) -> None:
    page = chat.page

    page.route("**/v1/models", as_vision)
    page.reload()
    attach = page.get_by_role("button", name="Attach file")
    expect(attach).to_be_visible()
    page.get_by_label("Image attachment file").set_input_files(
        files=[FilePayload(name="dot.png", mimeType="image/png", buffer=one_pixel_png())]
    )
    expect(page.get_by_role("list", name="Attached images").get_by_role("img")).to_have_count(1)
    with page.expect_request("**/v1/chat/completions") as sent:
        send(page, "What is in this picture?")
    content = json.loads(sent.value.post_data or "{}")["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "What is in this picture?"}
    assert content[1]["type"] == "image_url"
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    expect(page.get_by_role("article", name="User message").get_by_role("img")).to_be_visible()


def test_a_failure_mid_stream_is_shown_not_kept(chat: Tab) -> None:
    # Once the answer has started (200 sent) a failure arrives as the error envelope in
    # the stream's place: the node's wire format, replayed.
    head = {
        "id": "cmd-late",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": DEMO,
        "choices": [{"index": 0, "delta": {"content": " four,"}, "finish_reason": None}],
    }
    late = {"error": {"message": "the runner went away", "type": "server_error"}}
    page = chat.page
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(
            status=200,
            headers={"Content-Type": "text/event-stream"},
            body=f"data: {json.dumps(head)}\n\ndata: {json.dumps(late)}\n\n",
        ),
    )
    send(page, PROMPT)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("the runner went away")
    expect(alert.get_by_role("button", name="Retry")).to_be_visible()
    expect(page.get_by_role("article", name="Assistant message")).to_have_count(0)
    page.reload()
    expect(page.get_by_role("article", name="User message")).to_have_count(1)
    expect(page.get_by_role("article", name="Assistant message")).to_have_count(0)


def test_web_tools_run_the_models_call_and_send_the_result_back(
    chat: Tab, talker: DaemonProcess
) -> None:
    # The demo model calls no tools, so its first answer is the node's wire format for a
    # call, replayed; the page then runs it (the search answer is canned: the suite
    # reaches no search engine) and the follow-up goes to the real node with the call
    # and its result in the conversation, which the demo model answers.
    page = chat.page

    def with_tools(route: Route) -> None:
        listing = route.fetch().json()
        for item in listing["data"]:
            if item["id"] == DEMO:
                item["resolved_capabilities"]["supports_tools"] = True
        route.fulfill(json=listing)

    call = {"index": 0, "id": "call-1", "type": "function"}
    call["function"] = {"name": "web_search", "arguments": json.dumps({"query": "skulk"})}
    asks = {
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]
    }
    sent: list[dict[str, Any]] = []

    def first_asks_for_a_search(route: Route) -> None:
        sent.append(json.loads(route.request.post_data or "{}"))
        if len(sent) > 1:
            route.continue_()
            return
        body = f"data: {json.dumps({'id': 'cmd-tool', 'model': DEMO, **asks})}\n\ndata: [DONE]\n\n"
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

    found = {"query": "skulk", "provider": "test", "results": []}
    found["results"] = [{"title": "Skulk", "url": "https://example.org/skulk", "snippet": "A"}]
    searched: list[object] = []

    def search(route: Route) -> None:
        searched.append(json.loads(route.request.post_data or "{}"))
        route.fulfill(json=found)

    page.route("**/v1/models", with_tools)
    page.route("**/v1/chat/completions", first_asks_for_a_search)
    page.route("**/v1/tools/**", search)
    page.reload()
    answers: list[int] = []
    page.on(
        "response",
        lambda r: answers.append(r.status) if r.url.endswith("/v1/chat/completions") else None,
    )
    tools = page.get_by_role("checkbox", name="Web tools")
    expect(tools).not_to_be_checked()  # on by default only for GPT-OSS
    tools.check()
    send(page, PROMPT)
    result = page.get_by_role("article", name="Tool result")
    expect(result).to_contain_text("Searched the web for “skulk”: 1 result.")
    finished(page)
    assert searched == [{"query": "skulk"}]
    offered = [t["function"]["name"] for t in sent[0]["tools"]]
    assert offered == ["web_search", "open_url", "extract_page"]
    *_, asked, answered = sent[1]["messages"]
    assert asked["tool_calls"][0]["id"] == "call-1"
    assert answered["role"] == "tool" and answered["tool_call_id"] == "call-1"
    assert json.loads(answered["content"]) == found
    replies = page.get_by_role("article", name="Assistant message")
    expect(replies).to_have_count(2)
    expect(replies.first).to_contain_text("Asked to use web_search.")
    # NOTE: the follow-up is the real node's answer; the base demo model may well
    # answer with nothing but whitespace, so the page's answer is checked, not its text.
    assert answers == [200, 200]
    page.reload()
    expect(page.get_by_role("article", name="Tool result")).to_contain_text("“skulk”")
    assert chat.console.errors == []


def tab_to(page: Page, target: Locator, limit: int = 60) -> None:
    """Presses Tab until ``target`` has the focus, as a keyboard user would."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if target.evaluate("el => el === document.activeElement"):
            return
    raise AssertionError(f"{limit} presses of Tab never reached {target}")


def test_the_keyboard_alone_writes_and_sends_a_message(chat: Tab) -> None:
    page = chat.page
    tab_to(page, page.get_by_label("Max tokens"))
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type("1000")
    tab_to(page, page.get_by_role("textbox", name="Chat message"))
    page.keyboard.type(PROMPT)
    send_button = page.get_by_role("button", name="Send message")
    tab_to(page, send_button)
    expect(send_button).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("article", name="User message")).to_have_text(re.compile(PROMPT))
    page.get_by_role("button", name="Stop").click()  # the reply is not what this tests
    finished(page)
    assert chat.console.errors == []


def test_every_named_control_in_the_issue_has_its_role(chat: Tab, talker: DaemonProcess) -> None:
    # The accessible names issue #37 puts in quotes are a contract: other clients and
    # tests drive the page by them. Each is checked here with its role, on a real node.
    page = chat.page
    page.route("**/v1/models", as_vision)
    page.reload()
    model = page.get_by_role("combobox", name="Select chat model")
    expect(model).to_have_value(DEMO)
    served = {m["id"] for m in talker.get("/v1/models").json()["data"]}
    values = model.locator("option").evaluate_all("options => options.map(o => o.value)")
    assert values == [DEMO] and set(values) <= served
    assert model.evaluate("el => el.tagName") == "SELECT"
    composer = page.get_by_role("textbox", name="Chat message")
    expect(composer).to_have_attribute("placeholder", f"Message {DEMO}")
    for name in ("Send message", "+ New", "Attach file", "Speak draft", "Start recording"):
        expect(page.get_by_role("button", name=name, exact=True)).to_be_visible()
    image_input = page.get_by_label("Image attachment file")
    assert image_input.evaluate("el => [el.type, el.accept]")[0] == "file"
    expect(page.get_by_role("combobox", name="Select speech model")).to_have_value(TTS)
    expect(page.get_by_role("checkbox", name="Auto", exact=True)).not_to_be_checked()
    page.get_by_label("Max tokens").fill("1000")
    composer.fill("Once upon a time,")
    page.get_by_role("button", name="Send message").click()
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_visible()
    stop.click()
    finished(page)
    expect(page.get_by_role("article", name="User message")).to_have_count(1)
    expect(page.get_by_role("article", name="Assistant message")).to_have_count(1)
    # "Stop recording" replaces "Start recording" while the microphone is open:
    # test_the_microphone_is_transcribed_live walks it with a fake microphone.
    page.unroute("**/v1/models", as_vision)  # the catalog below is the real one

    # Models ("Find Models"): the search box and each model's actions.
    page.goto(f"{talker.url}/catalog")
    expect(page.get_by_role("heading", name="Find Models")).to_be_visible()
    expect(page.get_by_role("searchbox", name="Search models")).to_be_visible()
    catalog = page.get_by_role("list", name="Model catalog")
    for name in (f"Launch {DEMO}", f"Chat with {DEMO}"):
        expect(catalog.get_by_role("button", name=name, exact=True)).to_be_visible()
    missing = [m["id"] for m in talker.get("/v1/models").json()["data"] if not m["installed"]]
    if missing:  # "Download {model_id}" on an uninstalled card (search results: Models tests)
        download = catalog.get_by_role("button", name=f"Download {missing[0]}", exact=True)
        expect(download).to_be_visible()

    # Settings: a dialog with Save.
    page.get_by_role("button", name="Settings", exact=True).click()
    settings = page.get_by_role("dialog", name="Settings")
    expect(settings.get_by_role("button", name="Save", exact=True)).to_be_visible()
    page.keyboard.press("Escape")

    # First run, on the landing page: the welcome's telemetry step, then the cluster.
    page.goto(f"{talker.url}/cluster")
    page.get_by_role("dialog", name="Welcome to Skulk").get_by_role("button", name="Next").click()
    consent = page.get_by_role("dialog", name="Help make Skulk better?")
    consent.get_by_role("button", name="Not now", exact=True).click()
    expect(consent).to_be_hidden()
    inspect = page.get_by_role("button", name="Inspect live node diagnostics", exact=True)
    expect(inspect).to_have_count(1)
    assert chat.console.errors == []
