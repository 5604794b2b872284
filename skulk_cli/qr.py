"""QR codes for pairing packages: drawn in the terminal, or written as an owner-only PNG.

The terminal drawing packs two module rows into one character cell with half blocks
(``▀`` ``▄`` ``█``), so a code is about as tall as it is wide in a terminal font.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from skulk_cli.private_files import write_new_private

# Scanners want a light quiet zone around the code; four modules is the standard's
# figure. The terminal keeps two (plus the terminal's own margin) to stay narrow
# enough for an ordinary window; the PNG, which has room, keeps the full four.
TERMINAL_BORDER = 2
PNG_BORDER = 4
# Pixels per module in the PNG: big enough to print or show on another screen.
PNG_BOX_SIZE = 8
# NOTE: dark modules are drawn as the glyph's foreground on a light background set
# explicitly, so the code scans on dark terminal themes too. Without colour (NO_COLOR,
# a file) the glyphs alone still carry the pattern.
QR_STYLE = Style(color="black", bgcolor="white")
_HALF_BLOCKS = {(False, False): " ", (True, False): "▀", (False, True): "▄", (True, True): "█"}


class QrOutputExists(Exception):
    """The PNG path already exists; pairing material never overwrites a file."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} already exists; choose a new path for the QR image")
        self.path = path


def qr_matrix(data: str, *, border: int = TERMINAL_BORDER) -> list[list[bool]]:
    """The code's modules, ``True`` for dark, including a ``border``-module quiet zone."""
    import qrcode  # noqa: PLC0415 - only the pairing commands need it
    from qrcode.constants import ERROR_CORRECT_L  # noqa: PLC0415

    # Low error correction: the code is read off a screen, not a scuffed label, and
    # the lowest level keeps the largest payload smallest.
    code = qrcode.QRCode(error_correction=ERROR_CORRECT_L, border=border)
    code.add_data(data)
    code.make(fit=True)
    matrix: list[list[bool]] = [[bool(cell) for cell in row] for row in code.get_matrix()]
    return matrix


def half_block_lines(matrix: list[list[bool]]) -> list[str]:
    """Two module rows per text line; an odd last row is paired with a light one."""
    rows = [*matrix, [False] * len(matrix[0])] if len(matrix) % 2 else matrix
    return [
        "".join(_HALF_BLOCKS[top, bottom] for top, bottom in zip(upper, lower, strict=True))
        for upper, lower in zip(rows[::2], rows[1::2], strict=True)
    ]


@dataclass(frozen=True)
class TerminalQr:
    """A rich renderable drawing ``data`` as a QR code, or saying the terminal is too small.

    NOTE: a code wider than the terminal is never wrapped or cropped (either would
    print an unscannable pattern), and one taller than a terminal window cannot be seen
    whole to be scanned; the user is told the size it needs and the other ways instead.
    Output that is not a terminal (a file, a pipe) has no height and always gets the code.
    """

    data: str

    def lines(self) -> list[str]:
        return half_block_lines(qr_matrix(self.data))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self.lines()
        width, height = len(lines[0]), len(lines)
        rows = options.size.height if options.is_terminal else None
        if width > options.max_width or (rows is not None and height > rows):
            yield Text(too_small_hint(width, height, options.max_width, rows))
            return
        for line in lines:
            yield Segment(line, QR_STYLE)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        width = len(self.lines()[0])
        return Measurement(width, width)


def too_small_hint(width: int, height: int, columns: int, rows: int | None) -> str:
    """What to do when a ``width`` x ``height`` code does not fit the terminal."""
    has = f"{columns}x{rows}" if rows is not None else f"{columns} columns"
    return (
        f"(The QR code needs a terminal {width} columns wide and {height} rows tall; this "
        f"one is {has}. Enlarge the window or make its font smaller and run the command "
        "again, write the code as an image with --png FILE, or use the payload below.)"
    )


def png_bytes(data: str) -> bytes:
    """``data`` as a black-on-white PNG QR code (pypng, through qrcode's pure writer)."""
    import qrcode  # noqa: PLC0415
    from qrcode.constants import ERROR_CORRECT_L  # noqa: PLC0415
    from qrcode.image.pure import PyPNGImage  # noqa: PLC0415

    code = qrcode.QRCode(
        error_correction=ERROR_CORRECT_L,
        border=PNG_BORDER,
        box_size=PNG_BOX_SIZE,
        image_factory=PyPNGImage,
    )
    code.add_data(data)
    code.make(fit=True)
    buffer = io.BytesIO()
    code.make_image().save(buffer)
    return buffer.getvalue()


def refuse_existing(path: Path) -> None:
    """Raise :class:`QrOutputExists` when ``path`` names anything, even a dangling link."""
    if os.path.lexists(path):
        raise QrOutputExists(path)


def write_png(data: str, path: Path) -> None:
    """Write ``data``'s QR code to a new owner-only (0600) file at ``path``.

    The file is created with ``O_EXCL``, so an existing path (or one created since it
    was checked, or a symlink planted there) is refused rather than overwritten. A
    write that fails half-way removes the file it created.
    """
    content = png_bytes(data)
    try:
        write_new_private(path, content)
    except FileExistsError:
        raise QrOutputExists(path) from None
