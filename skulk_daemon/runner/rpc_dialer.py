"""Dialing a pool's donors from outside a driver's private network namespace.

A driver's gate clients live in its private namespace (runner/rpc_netns.py), where
only ``lo`` exists, yet must reach the donors over the fabric; and llama.cpp opens
its connections whenever it likes, so sockets made before the move cannot all be
made in advance. So before the move the driver forks this helper, which stays in
the machine's namespace: asked for donor ``i`` over a private socket pair, it
connects to the ``i``-th address it was given (and to nothing else) and hands the
connected socket back (``SCM_RIGHTS``). It holds no key and relays no bytes, and
exits when the driver closes its end or dies.

A fork, not a new interpreter: the driver is single-threaded when it makes one (see
``DriverGates``), and a fork needs neither an executable nor an import path the
driver's user may not have.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import Final, NoReturn

DIAL_TIMEOUT_SECONDS: Final = 5.0
EXIT_TIMEOUT_SECONDS: Final = 2.0
_REQUEST: Final = struct.Struct(">H")
_CONNECTED: Final = b"+"
_MAX_REPLY: Final = 1024
_MAX_FD: Final = 1 << 20
_POLL_SECONDS: Final = 0.02
HELPER_NAME: Final = b"skulk-rpc-dial"
"""The helper's process name (``ps -o comm``; its command line is the driver's)."""
_PR_SET_NAME: Final = 15


class Dialer:
    """The driver's handle on the helper; :meth:`dial` is safe from any thread."""

    def __init__(self, remotes: Sequence[tuple[str, int]]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:  # the helper
            _helper(theirs, list(remotes))
        theirs.close()
        self._pid = pid
        self._channel = ours
        self._lock = threading.Lock()

    def dial(self, index: int) -> socket.socket:
        """A socket connected to donor ``index``, made in the machine's namespace."""
        # NOTE: one request at a time: each reply is the answer to the request
        # before it, so concurrent gate clients take turns.
        with self._lock:
            self._channel.sendall(_REQUEST.pack(index))
            reply, fds, _, _ = socket.recv_fds(self._channel, _MAX_REPLY, 1)
        if reply != _CONNECTED or len(fds) != 1:
            for fd in fds:
                socket.close(fd)
            raise ConnectionError(reply.decode(errors="replace") or "the RPC dialer is gone")
        return socket.socket(fileno=fds[0])

    @property
    def pid(self) -> int:
        return self._pid

    def close(self) -> None:
        """Close the driver's end (the helper exits on it) and reap the helper."""
        self._channel.close()
        deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
        while os.waitpid(self._pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
                return
            time.sleep(_POLL_SECONDS)


def _helper(channel: socket.socket, remotes: Sequence[tuple[str, int]]) -> NoReturn:
    """The forked helper's whole life: keep only stderr and ``channel``, serve, exit."""
    code = 0
    try:
        # NOTE: the driver's other descriptors (its end of the pair, the daemon's
        # pipes) must not stay open here: the driver's end closing is what tells
        # this helper to exit, and the daemon reads the pipes' end as the runner's.
        ctypes.CDLL(None).prctl(_PR_SET_NAME, HELPER_NAME, 0, 0, 0)
        keep = channel.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, _MAX_FD)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        with contextlib.suppress(OSError):
            _serve(channel, remotes)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _serve(channel: socket.socket, remotes: Sequence[tuple[str, int]]) -> None:
    while len(request := channel.recv(_REQUEST.size)) == _REQUEST.size:
        (index,) = _REQUEST.unpack(request)
        if index >= len(remotes):
            channel.sendall(f"no donor {index} in this pool".encode())
            continue
        host, port = remotes[index]
        try:
            conn = socket.create_connection((host, port), timeout=DIAL_TIMEOUT_SECONDS)
        except OSError as exc:
            channel.sendall(f"cannot connect to {host}:{port}: {exc}".encode()[:_MAX_REPLY])
            continue
        with conn:
            conn.setblocking(True)  # the driver sets its own timeouts
            socket.send_fds(channel, [_CONNECTED], [conn.fileno()])
