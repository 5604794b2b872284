"""Where the cluster's store is: a node in ``State.store_hosts``, at its addresses.

A store host announces its role through the event log (``AnnounceStoreHost``), so
every node agrees on it; the address is the host part of that node's advertised API
URLs (its telemetry) with the store port. The node that is the store reaches its own
transport on loopback.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from skulk_daemon.node.node import Node

_ANY = ("0.0.0.0", "::", "")


def store_urls(node: Node) -> list[str]:
    """Base URLs of the store's internal transport, the nearest first; [] if none."""
    view = node.view()
    urls: list[str] = []
    for node_id, host in sorted(view.state.store_hosts.items()):
        if node_id == node.node_id:
            own = node.settings.host
            address = "127.0.0.1" if own in _ANY else own
            urls.insert(0, _url(address, host.port))
            continue
        reading = view.telemetry.get(node_id)
        for api_url in () if reading is None else reading.resources.api_urls:
            hostname = urlsplit(api_url).hostname
            if hostname:
                urls.append(_url(hostname, host.port))
    return urls


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
