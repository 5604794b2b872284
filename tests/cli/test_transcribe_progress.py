"""`skulk transcribe`'s upload progress: on a terminal a long file shows a bar of the
bytes sent on stderr, and stdout carries only the transcript; `--json` and output
that is not a terminal stay plain.

The node is a loopback HTTP server that reads the multipart upload slowly (as a
node far away would), records it and answers like `/v1/audio/transcriptions`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from skulk_cli.main import app

runner = CliRunner()
STT = "local/whisper-tiny.en"
TRANSCRIPT = "The quick brown fox jumps over the lazy dog."
PIECE = 256 * 1024


class Uploads:
    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []


def _handler(uploads: Uploads) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            body = bytearray()
            while len(body) < length:
                body += self.rfile.read(min(PIECE, length - len(body)))
                time.sleep(0.03)  # a slow link: the bar has time to move
            uploads.bodies.append((self.headers["Content-Type"], bytes(body)))
            fields = dict(re.findall(rb'name="(\w+)"\r\n\r\n([^\r]*)\r\n', bytes(body)))
            if fields.get(b"response_format") == b"json":
                payload, media = json.dumps({"text": TRANSCRIPT}).encode(), "application/json"
            else:
                payload, media = TRANSCRIPT.encode(), "text/plain"
            self.send_response(200)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, Uploads]]:
    uploads = Uploads()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(uploads))
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://{host!s}:{port}", uploads
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "long.wav"
    path.write_bytes(b"RIFF" + bytes(range(256)) * (3 * 4096))  # 3 MiB and a bit
    return path


def skulk(url: str, *args: str, terminal: bool) -> Result:
    env = {"COLUMNS": "100", "TTY_COMPATIBLE": "1" if terminal else "0"}
    return runner.invoke(app, ["--api-url", url, *args], env=env, prog_name="skulk")


def test_a_long_file_on_a_terminal_shows_the_upload_bar(
    node: tuple[str, Uploads], long_file: Path
) -> None:
    url, uploads = node
    before = len(uploads.bodies)
    result = skulk(url, "transcribe", STT, str(long_file), terminal=True)
    assert result.exit_code == 0, result.output
    assert result.stdout == TRANSCRIPT + "\n"
    err = result.stderr
    assert "Uploading long.wav" in err
    sizes = re.findall(r"(\d+\.\d)/3\.1 MB", err)
    assert len(set(sizes)) >= 2, err  # it moved while the bytes went out
    assert "Transcribing with local/whisper-tiny.en" in err
    # The whole file went, once.
    content_type, body = uploads.bodies[before]
    assert content_type.startswith("multipart/form-data")
    assert long_file.read_bytes() in body and len(uploads.bodies) == before + 1


def test_json_and_plain_output_stay_clean(node: tuple[str, Uploads], long_file: Path) -> None:
    url, uploads = node
    as_json = skulk(url, "--json", "transcribe", STT, str(long_file), terminal=True)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == {"text": TRANSCRIPT}
    assert as_json.stderr == ""
    assert b'name="response_format"\r\n\r\njson' in uploads.bodies[-1][1]

    piped = skulk(url, "transcribe", STT, str(long_file), terminal=False)
    assert piped.exit_code == 0, piped.output
    assert piped.stdout == TRANSCRIPT + "\n"
    assert "MB" not in piped.stderr and "Transcribing long.wav (3.0 MiB)" in piped.stderr


def test_a_short_file_shows_no_bar(node: tuple[str, Uploads], tmp_path: Path) -> None:
    url, _ = node
    short = tmp_path / "short.wav"
    short.write_bytes(b"RIFF" + bytes(1000))
    result = skulk(url, "transcribe", STT, str(short), terminal=True)
    assert result.exit_code == 0, result.output
    assert result.stdout == TRANSCRIPT + "\n"
    assert "Uploading" not in result.stderr
