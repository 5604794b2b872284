"""A driver's gates in a process of their own (``python -m tests.security.rpc_driver_child
HOST PORT``), for one donor gate at HOST:PORT: they move this process into its
private namespace, so the test that starts it must not be that process.

It relays one ``ping`` through its gate client, as llama.cpp would from inside,
prints a JSON report on stdout, and keeps the gates open until stdin closes.
"""

from __future__ import annotations

import json
import socket
import sys

from skulk_daemon.runner.protocol import RpcDonorRoute, RpcPool
from skulk_daemon.runner.rpc_relay import recv_exactly
from skulk_daemon.runner.rpc_roles import DriverGates
from tests.runner.test_rpc_gate import INSTANCE, KEY


def main(host: str, port: str) -> int:
    route = RpcDonorRoute(node_id="donor-node", endpoint=f"{host}:{port}", layers=1)
    pool = RpcPool(instance_id=INSTANCE, gate_key=KEY, donors=(route,))

    def lost(node_id: str, why: str) -> None:
        print(json.dumps({"lost": node_id, "why": why}), flush=True)

    gates = DriverGates(pool, lost)
    (endpoint,) = gates.endpoints
    local_host, local_port = endpoint.rsplit(":", 1)
    with socket.create_connection((local_host, int(local_port)), timeout=10) as sock:
        sock.sendall(b"ping")
        echoed = recv_exactly(sock, 4).decode()
    report = {
        "endpoint": endpoint,
        "private": gates.isolation.private,
        "fact": gates.isolation.fact,
        "echoed": echoed,
    }
    print(json.dumps(report), flush=True)
    sys.stdin.read()
    gates.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
