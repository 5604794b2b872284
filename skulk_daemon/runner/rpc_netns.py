"""A private network namespace for llama.cpp's RPC sockets (Linux).

llama.cpp's RPC server and client speak plain, unauthenticated TCP to a
``host:port`` (no Unix sockets), so on the machine's loopback any local user could
reach a donor's RPC server, or a driver's gate client (which answers the donor's
challenge for whoever connects): the gate would be bypassed. A runner in a pool
therefore moves into a network namespace of its own, with only ``lo`` in it, once
it has made the sockets that must stay on the machine's network: a socket keeps
the namespace it was created in, so a donor's gate listener (made first) still
takes connections from the fabric while llama.cpp's server on 127.0.0.1 inside is
reachable from this process alone; a driver dials its donors through a helper left
outside (runner/rpc_dialer.py).

``unshare(CLONE_NEWNET)`` needs CAP_SYS_ADMIN; an unprivileged process gets it in a
user namespace of its own (``CLONE_NEWUSER``, which the kernel grants only to a
single-threaded process). Where neither is possible (not Linux, namespaces disabled
or exhausted, a seccomp policy), :func:`isolate_network` says why and the caller
carries on without isolation, warning about what that leaves open.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWNET: Final = 0x40000000
_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_IFF_UP: Final = 0x1
_IFREQ: Final = struct.Struct("16sH22x")  # struct ifreq: name, then ifr_flags


@dataclass(frozen=True, slots=True)
class Isolation:
    """Whether this process's llama.cpp RPC sockets are private, and how (or why not)."""

    private: bool
    detail: str

    @property
    def fact(self) -> str:
        """What a runner reports (its ready phase's detail)."""
        if self.private:
            return f"llama.cpp RPC isolated in {self.detail}"
        return f"llama.cpp RPC NOT isolated ({self.detail}): reachable by any local process"


class IsolationError(OSError):
    """The process entered a private namespace but could not bring its loopback up."""


def namespaces_exist() -> bool:
    return sys.platform.startswith("linux")


def isolate_network() -> Isolation:
    """Move this process into a private network namespace with ``lo`` up.

    NOTE: a network namespace belongs to the calling *thread*: threads started
    earlier stay outside. Call it from the thread that goes on to start llama.cpp
    and every thread that opens its sockets.

    Raises IsolationError when the move succeeded but ``lo`` cannot be brought up
    (there is no way back; the caller fails rather than serve nothing).
    """
    if not namespaces_exist():
        return Isolation(private=False, detail="network namespaces exist on Linux only")
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    failures: list[str] = []
    attempts = (
        (CLONE_NEWNET, "a private network namespace"),
        (CLONE_NEWUSER | CLONE_NEWNET, "private user and network namespaces"),
    )
    for flags, where in attempts:
        if libc.unshare(ctypes.c_int(flags)) == 0:
            if flags & CLONE_NEWUSER:
                _map_self(uid, gid)
            try:
                _loopback_up()
            except OSError as exc:
                raise IsolationError(f"cannot bring up lo in {where}: {exc}") from None
            return Isolation(private=True, detail=where)
        failures.append(os.strerror(ctypes.get_errno()))
    reasons = "; ".join(
        f"{name}: {why}" for name, why in zip(("netns", "userns+netns"), failures, strict=True)
    )
    return Isolation(private=False, detail=f"unshare refused ({reasons})")


def _map_self(uid: int, gid: int) -> None:
    """Keep this process's own ids inside its new user namespace (cosmetic: files
    are still checked against the real ids; unmapped, they would read as nobody)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = fcntl.ioctl(probe.fileno(), _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0))
        flags = _IFREQ.unpack(request)[1]
        fcntl.ioctl(probe.fileno(), _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))
