"""A rank sleeps until MLX's ring has bytes for it, instead of spinning in ``recv``.

MLX's ring backend receives on non-blocking sockets, one worker thread per socket
retrying ``recv`` on ``EAGAIN`` for as long as a receive is pending. A rank that
waits for the rank before it (an idle ring, or rank 0 while the later ranks run
their layers) would spin at about half a core for nothing, taking that CPU from the
rank doing the work when they share a machine.

So a rank posts a receive only once there is something to receive: before each, it
blocks in ``poll(2)`` on the socket its left neighbour's data arrives on (until it
is readable, or closed: then MLX's receive fails as it would have). That socket is
the one connection MLX accepted on this rank's own hostfile address; every receive
in an ``MlxRing`` comes from the left (rank ``r - 1``, and rank 0 from the last).
MLX posts no receive of its own between ours, so nothing else reads it.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import stat

log = logging.getLogger(__name__)


def _own_address(hostfile: str, rank: int) -> tuple[str, int] | None:
    """This rank's first listening address in MLX's hostfile."""
    try:
        with open(hostfile, encoding="utf-8") as handle:
            hosts = json.load(handle)
        host, _, port = str(hosts[rank][0]).rpartition(":")
        return host, int(port)
    except (OSError, ValueError, IndexError, TypeError, KeyError):
        return None


def _accepted_on(address: tuple[str, int]) -> int | None:
    """The descriptor of the connected socket accepted on ``address``, if exactly one."""
    found: list[int] = []
    for name in os.listdir("/dev/fd"):
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            with socket.socket(fileno=os.dup(fd)) as probe:
                if probe.type != socket.SOCK_STREAM:
                    continue
                local = probe.getsockname()
                probe.getpeername()  # a listener has none: OSError
        except OSError:
            continue
        if isinstance(local, tuple) and (str(local[0]), int(local[1])) == address:
            found.append(fd)
    return found[0] if len(found) == 1 else None


class RingWait:
    """Blocks until the left neighbour's next bytes have arrived (see the module
    docstring). Build it after ``mx.distributed.init`` has joined the ring."""

    def __init__(self, rank: int) -> None:
        self._poll: select.poll | None = None
        hostfile = os.environ.get("MLX_HOSTFILE", "")
        address = _own_address(hostfile, rank) if hostfile else None
        fd = _accepted_on(address) if address is not None else None
        if fd is None:
            log.warning(
                "cannot find the MLX ring's socket from the left neighbour (rank %d at %s): "
                "this rank spins while it waits",
                rank,
                address,
            )
            return
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLPRI)
        log.info("MLX ring rank %d waits for its left neighbour on descriptor %d", rank, fd)

    @property
    def sleeps(self) -> bool:
        """Whether waiting sleeps (the socket was found)."""
        return self._poll is not None

    def wait(self) -> None:
        if self._poll is not None:
            self._poll.poll()
