"""Pairing QR codes: what the terminal draws and the PNG holds are the payload's code."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import png  # type: ignore[import-untyped]
import pytest
from rich.console import Console

from skulk_cli import qr
from skulk_core.operator.package import QR_PAYLOAD_BUDGET, DirectPackage, encode_pairing_uri

PAYLOAD = "skulk://pair?z=" + "eJyrVkrOz0tLTS7JzM9TslIqzsgvyklRqgUAZ-0I5A" * 4
_GLYPH_MODULES = {" ": (False, False), "▀": (True, False), "▄": (False, True), "█": (True, True)}


def _modules_from_lines(lines: list[str]) -> list[list[bool]]:
    """Read the half-block drawing back into module rows (two per text line)."""
    rows: list[list[bool]] = []
    for line in lines:
        pairs = [_GLYPH_MODULES[ch] for ch in line]
        rows.append([top for top, _ in pairs])
        rows.append([bottom for _, bottom in pairs])
    return rows


def test_terminal_drawing_is_exactly_the_payloads_code() -> None:
    matrix = qr.qr_matrix(PAYLOAD)
    lines = qr.TerminalQr(PAYLOAD).lines()

    drawn = _modules_from_lines(lines)
    # An odd module count is padded with one light row.
    assert drawn[: len(matrix)] == matrix
    assert all(not cell for row in drawn[len(matrix) :] for cell in row)
    # A light quiet zone of TERMINAL_BORDER modules on every side.
    border = qr.TERMINAL_BORDER
    assert not any(matrix[0]) and not any(matrix[border - 1])
    assert all(not row[0] for row in matrix)
    assert matrix[border][border] and matrix[border][-border - 1]  # finder patterns


def test_terminal_drawing_paints_light_background_for_dark_themes() -> None:
    console = Console(width=120, height=60, force_terminal=True, color_system="truecolor")
    with console.capture() as captured:
        console.print(qr.TerminalQr(PAYLOAD))

    out = captured.get()
    assert "\x1b[" in out  # styled, so the light background is explicit
    assert "▀" in out or "▄" in out


def test_a_terminal_too_narrow_gets_a_hint_not_a_broken_code() -> None:
    width = len(qr.TerminalQr(PAYLOAD).lines()[0])
    console = Console(width=width - 1, force_terminal=False)
    with console.capture() as captured:
        console.print(qr.TerminalQr(PAYLOAD))

    out = captured.get()
    assert "▀" not in out and "█" not in out
    assert f"needs a terminal {width} columns wide" in out
    assert "--png FILE" in out


def test_the_largest_package_in_budget_fits_a_terminal() -> None:
    # The package budget (skulk_core.operator.package) assumes error correction L: a
    # full-budget payload is at most a version-20 symbol, 101 columns with the quiet zone.
    lines = qr.TerminalQr("skulk://pair?z=" + "A" * (QR_PAYLOAD_BUDGET - 15)).lines()

    assert len(lines[0]) <= 17 + 4 * 20 + 2 * qr.TERMINAL_BORDER


def test_png_is_owner_only_and_holds_the_payloads_code(tmp_path: Path) -> None:
    target = tmp_path / "pair.png"

    qr.write_png(PAYLOAD, target)

    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    content = target.read_bytes()
    assert content.startswith(b"\x89PNG\r\n\x1a\n")
    width, height, rows, _ = png.Reader(bytes=content).read()
    pixels = [list(row) for row in rows]
    matrix = qr.qr_matrix(PAYLOAD, border=qr.PNG_BORDER)
    box = qr.PNG_BOX_SIZE
    assert width == height == len(matrix) * box
    # One sample per module, from its centre: dark modules are black (0).
    sampled = [
        [pixels[r * box + box // 2][c * box + box // 2] == 0 for c in range(len(matrix))]
        for r in range(len(matrix))
    ]
    assert sampled == matrix


def test_png_is_written_owner_only_even_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        qr.write_png(PAYLOAD, tmp_path / "pair.png")
    finally:
        os.umask(previous)

    assert stat.S_IMODE((tmp_path / "pair.png").stat().st_mode) == 0o600


def test_png_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "keep.png"
    target.write_bytes(b"precious")

    with pytest.raises(qr.QrOutputExists):
        qr.refuse_existing(target)
    with pytest.raises(qr.QrOutputExists):
        qr.write_png(PAYLOAD, target)

    assert target.read_bytes() == b"precious"


def test_png_refuses_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    link = tmp_path / "pair.png"
    link.symlink_to(victim)
    dangling = tmp_path / "dangling.png"
    dangling.symlink_to(tmp_path / "nowhere")

    for path in (link, dangling):
        with pytest.raises(qr.QrOutputExists):
            qr.refuse_existing(path)
        with pytest.raises(qr.QrOutputExists):
            qr.write_png(PAYLOAD, path)

    assert victim.read_bytes() == b"untouched"
    assert not (tmp_path / "nowhere").exists()


def test_png_bytes_are_a_valid_image() -> None:
    content = qr.png_bytes(PAYLOAD)

    reader = png.Reader(file=io.BytesIO(content))
    width, height, _, info = reader.read()
    assert width == height and info["greyscale"]


# What `skulk operator pair` shows by default: a direct (version one) package.
DIRECT = encode_pairing_uri(
    DirectPackage(
        cluster_id="655a6309-e51f-4bc2-a5ac-ec579c3eba96",
        cluster_name="Skulk",
        fingerprint="sha256:" + "U" * 43,
        nonce="n" * 43,
        expires_at=1796518139,
        exchange_url="https://127.0.0.1:52417",
    )
)


def _shown_on(console: Console, data: str = DIRECT) -> str:
    with console.capture() as captured:
        console.print(qr.TerminalQr(data))
    return captured.get()


def test_an_80x24_terminal_gets_the_size_it_needs_and_the_png_way() -> None:
    lines = qr.TerminalQr(DIRECT).lines()
    # A direct package (~260 characters) needs a version-10 symbol even at error
    # correction L: it fits 80 columns, but two module rows per line are 31 rows.
    assert len(lines) > 24 and len(lines[0]) <= 80

    out = _shown_on(Console(width=80, height=24, force_terminal=True, color_system=None))

    assert "▀" not in out and "█" not in out
    said = " ".join(out.split())
    assert f"needs a terminal {len(lines[0])} columns wide and {len(lines)} rows tall" in said
    assert "this one is 80x24" in said and "--png FILE" in said


def test_a_terminal_tall_enough_gets_the_code_and_a_pipe_always_does() -> None:
    lines = qr.TerminalQr(DIRECT).lines()
    tall = _shown_on(Console(width=80, height=len(lines), force_terminal=True, color_system=None))
    piped = _shown_on(Console(width=80, height=24, force_terminal=False))

    for out in (tall, piped):
        assert out.splitlines() == lines
