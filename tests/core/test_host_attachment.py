"""The host-attachment answer's pure parts: the domain-separated fingerprint against a
digest computed by hand (``printf 'skulk-host-attachment-v1\\0skulk/3' | sha256sum``),
the listener-to-endpoint rule and the camelCase shape."""

from __future__ import annotations

import msgspec
import pytest

from skulk_core.plugins.host_attachment import (
    Endpoint,
    UnsupportedListener,
    endpoints,
    host_network,
    local_endpoint,
    namespace_fingerprint,
    namespace_token,
)

# sha256sum of the bytes, outside Python; and of the bare token (no domain), to show
# the domain separation changes the digest.
BY_HAND = "c8dd7fb1908b9045d555982eb66096884cb3d5fab57a0d3546221c08e16dbe50"
UNSEPARATED = "70b65d66e5ae3690832fdd47ddc59cb3c52eacb81894ba7df4e4c4e68c6cdee7"


def test_the_fingerprint_is_the_domain_separated_digest_of_the_token() -> None:
    token = namespace_token("skulk", "3")
    assert token == "skulk/3"
    assert namespace_fingerprint(token) == BY_HAND
    assert namespace_fingerprint(token) != UNSEPARATED
    assert namespace_fingerprint(namespace_token("skulk", "4")) != BY_HAND
    assert namespace_fingerprint(namespace_token("other", "3")) != BY_HAND


@pytest.mark.parametrize(("namespace", "version"), [("", "3"), ("skulk", ""), ("a\x00b", "3")])
def test_a_token_needs_both_parts_and_no_nul(namespace: str, version: str) -> None:
    with pytest.raises(ValueError):
        namespace_token(namespace, version)


def test_listeners_become_numeric_local_endpoints() -> None:
    assert local_endpoint("0.0.0.0", 5000) == Endpoint(host="127.0.0.1", port=5000)
    assert local_endpoint("::", 5000) == Endpoint(host="::1", port=5000)
    assert local_endpoint("192.168.1.5", 5000) == Endpoint(host="192.168.1.5", port=5000)
    assert local_endpoint("0:0:0:0:0:0:0:1", 5000) == Endpoint(host="::1", port=5000)
    for host, port in (("localhost", 5000), ("127.0.0.1", 0), ("127.0.0.1", 65536)):
        with pytest.raises(UnsupportedListener):
            local_endpoint(host, port)
    both = endpoints([("::", 7), ("0.0.0.0", 7), ("127.0.0.1", 7)])
    assert both == (Endpoint(host="127.0.0.1", port=7), Endpoint(host="::1", port=7))
    with pytest.raises(UnsupportedListener, match="no TCP listener"):
        endpoints([])


def test_the_answer_is_camel_case_and_carries_no_raw_namespace() -> None:
    answer = host_network(
        node_id="12D3KooWnode",
        namespace="skulk",
        network_version="3",
        control=[("0.0.0.0", 41000)],
        data_transport="zmq",
        data=[],
    )
    encoded = msgspec.json.encode(answer)
    assert msgspec.json.decode(encoded) == {
        "nodeId": "12D3KooWnode",
        "networkVersion": "3",
        "namespaceFingerprint": BY_HAND,
        "controlEndpoints": [{"host": "127.0.0.1", "port": 41000}],
        "dataTransport": "zmq",
        "dataEndpoints": [],
    }
    assert b"skulk/3" not in encoded
