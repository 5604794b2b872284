"""Whether this machine lets two mDNS responders meet over loopback."""

from __future__ import annotations

import socket
import uuid

LOOPBACK = "127.0.0.1"
MDNS_GROUP = "224.0.0.251"
MDNS_PORT = 5353


def loopback_mdns_problem() -> str | None:
    """Why two mDNS responders cannot meet over loopback here, or None if they can."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # zeroconf shares the mDNS port this way; a responder holding it
        # exclusively would lock us out.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind(("", MDNS_PORT))
    except OSError as exc:
        return f"cannot share UDP port {MDNS_PORT} (mDNS): {exc}"
    finally:
        probe.close()
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.bind(("", 0))
        port = receiver.getsockname()[1]
        membership = socket.inet_aton(MDNS_GROUP) + socket.inet_aton(LOOPBACK)
        try:
            receiver.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        except OSError as exc:
            return f"joining {MDNS_GROUP} on {LOOPBACK} failed: {exc}"
        sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(LOOPBACK))
        sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        token = uuid.uuid4().bytes
        try:
            sender.sendto(token, (MDNS_GROUP, port))
        except OSError as exc:
            return f"sending to {MDNS_GROUP} via {LOOPBACK} failed: {exc}"
        receiver.settimeout(1.0)
        try:
            while receiver.recv(64) != token:
                pass
        except TimeoutError:
            return f"a datagram sent to {MDNS_GROUP}:{port} via {LOOPBACK} did not loop back in 1 s"
        return None
    finally:
        receiver.close()
        sender.close()
