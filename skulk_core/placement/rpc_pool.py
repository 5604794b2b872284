"""llama.cpp RPC pools (``LlamaRpcInstance``): where each donor's RPC server listens.

A pooled GGUF model has one driver (rank 0, which loads the model, holds the first
layers and generates) and donors (ranks 1..), each running llama.cpp's RPC server
on a port the placement assigns, at the address the driver reaches it by over the
fabric. Ports are chosen per host, so several nodes on one machine (or several
pools on one donor) never collide, and a port a donor reported as taken is skipped.

A driver dials exactly the endpoints its instance names, so they come from topology
and never from a caller: :func:`endpoints_problem` is the check every admission of
a pool (the API node's and the master's) applies to what it is given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from skulk_core.ids import NodeId
from skulk_core.state.shards import (
    Instance,
    LlamaRpcInstance,
    MlxRingInstance,
    RpcDonorShardMetadata,
)
from skulk_core.state.state import Connection, InstanceFailure

RPC_PORT_BASE: Final = 52500
"""The first port a donor's RPC server is assigned (the fabric takes 52416 and the
operator listener 52417)."""
RPC_PORT_SPAN: Final = 500

RPC_PORT_IN_USE: Final = "rpc_port_in_use"
"""``errorCode`` prefix of a donor whose assigned port was taken: ``rpc_port_in_use:host:port``."""
RPC_DONOR_LOST: Final = "rpc_donor_lost"
"""``errorCode`` prefix of a pool whose donor went away: ``rpc_donor_lost:<node id>``."""
MLX_RING_PEER_LOST: Final = "mlx_ring_peer_lost"
"""``errorCode`` prefix of an MLX ring that lost a rank (its node, runner or link):
``mlx_ring_peer_lost:<node id>``; placed again."""


def split_endpoint(endpoint: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` for IPv6) as its parts, or None if malformed."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def join_endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def multiaddr_host(multiaddr: str) -> str | None:
    """The IP of a ``/ip4/<ip>/tcp/<port>`` or ``/ip6/<ip>/tcp/<port>`` address."""
    parts = multiaddr.split("/")
    if len(parts) >= 3 and parts[0] == "" and parts[1] in ("ip4", "ip6") and parts[2]:
        return parts[2]
    return None


def _canonical(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def donor_hosts(donor: NodeId, connections: Iterable[Connection]) -> frozenset[str]:
    """Every address a member's fabric edge reaches ``donor`` at (canonical form)."""
    return frozenset(
        _canonical(host)
        for edge in connections
        if edge.send_back_node_id == donor
        and (host := multiaddr_host(edge.sink_multiaddr)) is not None
    )


def donor_host(driver: NodeId, donor: NodeId, connections: Iterable[Connection]) -> str | None:
    """The address the driver reaches ``donor`` at: the driver's own edge to it,
    else any member's edge (a reachable address all the same), else None."""
    fallback: str | None = None
    for edge in connections:
        if edge.send_back_node_id != donor:
            continue
        host = multiaddr_host(edge.sink_multiaddr)
        if host is None:
            continue
        if edge.local_node_id == driver:
            return host
        fallback = fallback or host
    return fallback


def ports_in_use(
    instances: Iterable[Instance], failures: Iterable[InstanceFailure] = ()
) -> dict[str, frozenset[int]]:
    """Per host, the RPC ports that placed pools hold or that a donor found taken."""
    used: dict[str, set[int]] = {}
    for instance in instances:
        if isinstance(instance, MlxRingInstance):
            held = instance.ring_endpoints.values()
        elif isinstance(instance, LlamaRpcInstance):
            held = instance.rpc_endpoints.values()
        else:
            continue
        for endpoint in held:
            parts = split_endpoint(endpoint)
            if parts is not None:
                used.setdefault(parts[0], set()).add(parts[1])
    for failure in failures:
        prefix, _, endpoint = failure.error_code.partition(":")
        parts = split_endpoint(endpoint) if prefix == RPC_PORT_IN_USE else None
        if parts is not None:
            used.setdefault(parts[0], set()).add(parts[1])
    return {host: frozenset(ports) for host, ports in used.items()}


def assign_endpoints(
    ring: Sequence[NodeId],
    connections: Iterable[Connection],
    in_use: Mapping[str, frozenset[int]],
) -> dict[NodeId, str] | str:
    """An RPC endpoint for every donor of ``ring`` (``ring[0]`` drives), or why not."""
    edges = tuple(connections)
    taken = {host: set(ports) for host, ports in in_use.items()}
    endpoints: dict[NodeId, str] = {}
    for donor in ring[1:]:
        host = donor_host(ring[0], donor, edges)
        if host is None:
            return f"no fabric address is known for donor node {donor}"
        busy = taken.setdefault(host, set())
        port = next(
            (p for p in range(RPC_PORT_BASE, RPC_PORT_BASE + RPC_PORT_SPAN) if p not in busy),
            None,
        )
        if port is None:
            return f"every RPC port from {RPC_PORT_BASE} on {host} is taken"
        busy.add(port)
        endpoints[donor] = join_endpoint(host, port)
    return endpoints


def assign_ring_endpoints(
    ring: Sequence[NodeId],
    connections: Iterable[Connection],
    in_use: Mapping[str, frozenset[int]],
) -> dict[NodeId, str] | str:
    """A gate endpoint for every rank of an MLX ring (from the same port range as
    RPC pools): each node at the address its left neighbour, which dials it,
    reaches it by; or why not."""
    edges = tuple(connections)
    taken = {host: set(ports) for host, ports in in_use.items()}
    endpoints: dict[NodeId, str] = {}
    for rank, node in enumerate(ring):
        host = donor_host(ring[rank - 1], node, edges)
        if host is None:
            return f"no fabric address is known for ring node {node}"
        busy = taken.setdefault(host, set())
        port = next(
            (p for p in range(RPC_PORT_BASE, RPC_PORT_BASE + RPC_PORT_SPAN) if p not in busy),
            None,
        )
        if port is None:
            return f"every ring port from {RPC_PORT_BASE} on {host} is taken"
        busy.add(port)
        endpoints[node] = join_endpoint(host, port)
    return endpoints


def endpoints_problem(instance: LlamaRpcInstance, connections: Iterable[Connection]) -> str | None:
    """Why the pool's ``rpcEndpoints`` are not ones placement would assign, if not.

    Each donor of the pool, and no other node, is named at an address a fabric edge
    reaches it by (what :func:`assign_endpoints` chooses from: any member's edge,
    since the edges may change between planning and ordering) on one of the RPC
    ports. Anything else would point the driver at a host that is not the donor.
    """
    assignments = instance.shard_assignments
    donors = {
        node
        for node, runner in assignments.node_to_runner.items()
        if isinstance(assignments.runner_to_shard.get(runner), RpcDonorShardMetadata)
    }
    missing = sorted(donors - set(instance.rpc_endpoints))
    if missing:
        return f"donor node {missing[0]} has no rpcEndpoints entry"
    edges = tuple(connections)
    for node, endpoint in instance.rpc_endpoints.items():
        if node not in donors:
            return f"rpcEndpoints names node {node}, which is not a donor of this pool"
        parts = split_endpoint(endpoint)
        if parts is None:
            return f"donor node {node}'s RPC endpoint {endpoint!r} is not host:port"
        host, port = parts
        if _canonical(host) not in donor_hosts(node, edges):
            expected = donor_host(instance.driver_node_id, node, edges)
            known = "no fabric edge reaches it" if expected is None else f"it is {expected}"
            return (
                f"donor node {node}'s RPC endpoint {endpoint} is not an address the "
                f"fabric knows that node by ({known})"
            )
        if not RPC_PORT_BASE <= port < RPC_PORT_BASE + RPC_PORT_SPAN:
            return (
                f"donor node {node}'s RPC port {port} is outside the RPC ports "
                f"{RPC_PORT_BASE}-{RPC_PORT_BASE + RPC_PORT_SPAN - 1}"
            )
    return None
