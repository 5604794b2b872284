"""A command run on a real pseudo-terminal (its controlling terminal, so ``getpass``
turns echo off as it does for an owner), driven by expect/send."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _controlling_terminal() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            preexec_fn=_controlling_terminal,  # noqa: PLW1509 - no threads touch the child
        )
        os.close(slave)
        self.master = master
        self.transcript = ""
        self._seen = 0

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            return False
        text = _ANSI.sub("", chunk.decode(errors="replace"))
        self.transcript += text.replace("\r\n", "\n")
        return True

    def expect(self, text: str, timeout: float = 90.0) -> str:
        """Wait for ``text`` after what was already matched; what came before it."""
        deadline = time.monotonic() + timeout
        while (found := self.transcript.find(text, self._seen)) < 0:
            open_ = self._read(0.2)
            assert open_ or self.transcript.find(text, self._seen) >= 0, (
                f"the terminal closed before {text!r}:\n{self.transcript}"
            )
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.transcript}"
        before = self.transcript[self._seen : found]
        self._seen = found + len(text)
        return before

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.2) and self.process.poll() is None:
            assert time.monotonic() < deadline, self.transcript
        with contextlib.suppress(OSError):
            while self._read(0.05):
                pass
        code = self.process.wait(timeout=30)
        os.close(self.master)
        return code
