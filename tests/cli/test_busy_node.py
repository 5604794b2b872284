"""A node that takes a request and answers late is busy, not missing: the CLI says so
instead of "no Skulk node answering", and says what to do."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import typer

from skulk_cli.context import CliContext, node_client
from skulk_cli.node_http import unreachable


@pytest.fixture
def silent_node() -> Iterator[str]:
    """A listener that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_a_node_that_answers_late_is_called_busy(
    silent_node: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit), node_client(CliContext(api_url=silent_node)) as client:
        client._request("GET", "/node_id", timeout=0.3)
    said = " ".join(capsys.readouterr().err.split())
    assert f"The node at {silent_node} took the request but did not answer in time." in said
    assert "try again in a moment" in said and "skulk logs" in said
    assert "No Skulk node answering" not in said


def test_nothing_listening_is_still_no_node() -> None:
    refused = unreachable("http://127.0.0.1:9", httpx.ConnectError("refused"))
    assert not refused.busy
    assert unreachable("http://127.0.0.1:9", httpx.ReadTimeout("late")).busy
