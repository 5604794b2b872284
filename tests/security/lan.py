"""Another machine on the LAN: a network namespace on a veth pair, with callers in it.

The host side of the pair carries one address in each trust class the policy tells
apart, and the namespace its twin: a request from the namespace to ``10.77.0.1`` comes
from a private-LAN peer, to ``100.77.0.1`` from a CGNAT peer, and to ``198.51.100.1``
(TEST-NET-2) from a public one. Traffic never leaves this machine.

The addresses are fixed, so two such LANs at once (two xdist workers) would hold the
same subnets on two veth pairs and route replies astray: every module that makes one
is in the ``network`` xdist group (the ``network`` fixture fails a test outside it;
``tests/test_xdist_workers.py`` checks the modules that import this one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

PRIVATE_HOST = "10.77.0.1"
CGNAT_HOST = "100.77.0.1"
PUBLIC_HOST = "198.51.100.1"
_PAIRS = (
    ("10.77.0.1", "10.77.0.2"),
    ("100.77.0.1", "100.77.0.2"),
    ("198.51.100.1", "198.51.100.2"),
)

# Requests made from inside the namespace: one interpreter start for a whole batch.
_CALLER = """
import json, sys, httpx
results = []
for request in json.load(sys.stdin):
    try:
        r = httpx.request(timeout=30, **request)
        body = r.text
        results.append({"status": r.status_code, "body": body, "headers": dict(r.headers)})
    except httpx.HTTPError as exc:
        results.append({"status": None, "body": repr(exc), "headers": {}})
json.dump(results, sys.stdout)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Caller:
    """A caller started in the namespace ahead of its requests (its interpreter up and
    httpx imported), for requests that must go out at once when their moment comes
    (while a generation is in flight: the caller's start would otherwise run beside
    it, and the generation meanwhile)."""

    def __init__(self, namespace: str) -> None:
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, "-c", _CALLER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, *requests: dict[str, Any]) -> list[dict[str, Any]]:
        """Make ``requests`` (``httpx.request`` keyword arguments); once only."""
        out, err = self.process.communicate(json.dumps(list(requests)), timeout=120)
        assert self.process.returncode == 0, err
        results: list[dict[str, Any]] = json.loads(out)
        return results

    def close(self) -> None:
        if self.process.returncode is None:  # never sent: it still waits for requests
            self.process.kill()
            self.process.communicate()


@dataclass(frozen=True)
class Lan:
    namespace: str

    def caller(self) -> Caller:
        """A :class:`Caller` started now; close it when done."""
        return Caller(self.namespace)

    def requests(self, *requests: dict[str, Any]) -> list[dict[str, Any]]:
        """Make ``requests`` (``httpx.request`` keyword arguments) from the other machine."""
        return self.caller().send(*requests)

    def request(self, **request: Any) -> dict[str, Any]:
        return self.requests(request)[0]


@contextmanager
def lan() -> Iterator[Lan]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = f"{os.getpid() % 100000}"
    namespace, host_if, ns_if = f"skulk-lan-{tag}", f"skh{tag}", f"skn{tag}"
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", namespace)
        for host, peer in _PAIRS:
            _ip("addr", "add", f"{host}/24", "dev", host_if)
            _ip("-n", namespace, "addr", "add", f"{peer}/24", "dev", ns_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", namespace, "link", "set", ns_if, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        yield Lan(namespace)
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
