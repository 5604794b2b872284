"""Binding a TCP listening socket ourselves, so a port in use is one clear message
(naming the flag that changes it) rather than a traceback from the server."""

from __future__ import annotations

import errno
import socket


class BindError(OSError):
    """The port cannot be bound; the message says why and what to change."""


def bind_listener(host: str, port: int, *, what: str, flag: str, backlog: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port) for ``what``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # NOTE: IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections
    # only for sockets that say they are TCP, and without it every request on a
    # kept-alive connection waits ~40 ms for delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BindError(
                f"{what} port {port} on {host} is already in use (another Skulk node?); "
                f"stop it or pass {flag}"
            ) from None
        raise BindError(f"cannot listen on {host}:{port} for the {what}: {exc.strerror}") from None
    sock.listen(backlog)
    return sock
