"""The request-authority policy as a pure decision: each class of caller, each door."""

from __future__ import annotations

import dataclasses

import pytest

from skulk_daemon.authority.hosts import OwnNames
from skulk_daemon.authority.peers import PeerClass, classify, classify_name, split_host
from skulk_daemon.authority.policy import (
    Caller,
    Refusal,
    RequestFacts,
    Requirement,
    RouteAuthority,
    decide,
)

OPEN = RouteAuthority(Requirement.OPEN)
FABRIC = RouteAuthority(Requirement.TRUSTED_FABRIC)
LOOPBACK = RouteAuthority(Requirement.DIRECT_LOOPBACK)
ADD_CARD = RouteAuthority(Requirement.DIRECT_LOOPBACK, service_bearer=True)

LOCAL = RequestFacts(
    method="POST",
    peer=PeerClass.LOOPBACK,
    forwarded=None,
    host="127.0.0.1",
    host_is_own=True,
    origin=None,
    content_type="application/json",
    has_body=True,
)


def facts(**changes: object) -> RequestFacts:
    return dataclasses.replace(LOCAL, **changes)  # type: ignore[arg-type]


def refused(outcome: Caller | Refusal) -> tuple[int, str]:
    assert isinstance(outcome, Refusal), outcome
    return outcome.status, outcome.code


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", PeerClass.LOOPBACK),
        ("::1", PeerClass.LOOPBACK),
        ("::ffff:127.0.0.1", PeerClass.LOOPBACK),
        ("10.1.2.3", PeerClass.PRIVATE_LAN),
        ("172.31.0.9", PeerClass.PRIVATE_LAN),
        ("192.168.1.20", PeerClass.PRIVATE_LAN),
        ("fd00::5", PeerClass.PRIVATE_LAN),
        ("100.100.1.1", PeerClass.CGNAT),
        ("172.32.0.1", PeerClass.PUBLIC),
        ("203.0.113.7", PeerClass.PUBLIC),
        ("8.8.8.8", PeerClass.PUBLIC),
        ("not-an-ip", PeerClass.UNKNOWN),
        (None, PeerClass.UNKNOWN),
    ],
)
def test_socket_peers_are_classified_by_the_spec_classes(
    address: str | None, kind: PeerClass
) -> None:
    assert classify(address) is kind


def test_localhost_names_are_loopback_origins() -> None:
    assert classify_name("localhost") is PeerClass.LOOPBACK
    assert classify_name("app.localhost") is PeerClass.LOOPBACK
    assert classify_name("evil.example") is PeerClass.UNKNOWN


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.1:52415", "127.0.0.1"),
        ("[::1]:52415", "::1"),
        ("Node.Local.", "node.local"),
        ("evil.example", "evil.example"),
        ("a b", None),
        ("user@host", None),
        ("host:port", None),
        ("[::1", None),
        ("", None),
    ],
)
def test_host_headers_are_parsed_strictly(header: str, host: str | None) -> None:
    assert split_host(header) == host


def test_own_names_cover_loopback_interfaces_hostnames_and_configured_names() -> None:
    names = OwnNames(
        configured=("Gateway.Example",),
        addresses=lambda: {"10.0.0.5", "fe80::1"},
        hostnames=lambda: {"box", "box.local"},
    )
    for host in ("localhost", "x.localhost", "127.0.0.2", "::1", "10.0.0.5", "box.local"):
        assert names.is_own(host), host
    assert names.is_own("gateway.example")
    assert not names.is_own("evil.example")
    assert not names.is_own("10.0.0.6")


def test_a_local_caller_may_do_anything() -> None:
    for route in (OPEN, FABRIC, LOOPBACK):
        assert decide(LOCAL, route) is Caller.LOOPBACK


def test_a_foreign_host_is_misdirected_whatever_the_route() -> None:
    # DNS rebinding: the browser believes it talks to evil.example.
    for route in (OPEN, FABRIC, LOOPBACK):
        assert refused(decide(facts(host="evil.example", host_is_own=False), route)) == (
            421,
            "misdirected_host",
        )
    assert refused(decide(facts(method="GET", host=None, host_is_own=False), OPEN))[0] == 421


def test_a_body_that_is_not_json_is_refused_before_any_authority() -> None:
    # A web page can POST text/plain without a CORS preflight.
    for content_type in ("text/plain", None, "application/x-www-form-urlencoded"):
        assert refused(decide(facts(content_type=content_type), FABRIC)) == (
            415,
            "unsupported_media_type",
        )
    assert decide(facts(content_type="application/vnd.api+json"), FABRIC) is Caller.LOOPBACK
    # No body (a bare POST /v1/cancel/{id}) needs no content type.
    assert decide(facts(content_type=None, has_body=False), OPEN) is Caller.LOOPBACK


def test_an_untyped_json_route_takes_curl_bodies_but_never_a_pages() -> None:
    ollama = RouteAuthority(Requirement.OPEN, untyped_json=True)
    # `curl -d` sends a form type; other clients send none at all.
    for content_type in (None, "application/x-www-form-urlencoded", "text/plain"):
        assert decide(facts(content_type=content_type), ollama) is Caller.LOOPBACK
        # A browser puts an Origin on every cross-site POST: that one stays a CSRF.
        page = facts(content_type=content_type, origin="http://evil.example")
        assert refused(decide(page, ollama)) == (415, "unsupported_media_type")
        own = facts(content_type=content_type, origin="http://127.0.0.1:52415", origin_is_own=True)
        assert refused(decide(own, ollama)) == (415, "unsupported_media_type")
    assert refused(decide(facts(content_type="multipart/form-data"), ollama)) == (
        415,
        "unsupported_media_type",
    )


def test_a_cross_site_origin_cannot_change_anything() -> None:
    hostile = facts(origin="https://evil.example", origin_class=PeerClass.UNKNOWN)
    for route in (OPEN, FABRIC, LOOPBACK):
        assert refused(decide(hostile, route)) == (403, "cross_origin")
    # ...but may read, and a configured CORS origin may call.
    assert decide(dataclasses.replace(hostile, method="GET"), OPEN) is Caller.LOOPBACK
    assert decide(dataclasses.replace(hostile, origin_allowed=True), OPEN) is Caller.LOOPBACK


def test_the_dashboard_on_a_lan_machine_may_place_but_not_retarget_secrets() -> None:
    lan = facts(
        peer=PeerClass.PRIVATE_LAN,
        host="10.0.0.5",
        origin="http://10.0.0.5:52415",
        origin_is_own=True,
        origin_class=PeerClass.PRIVATE_LAN,
    )
    assert decide(lan, FABRIC) is Caller.TRUSTED_FABRIC
    assert refused(decide(lan, LOOPBACK)) == (403, "loopback_required")
    # A page on another LAN machine is another site, whatever its address class.
    other = dataclasses.replace(lan, origin="http://10.0.0.9", origin_is_own=False)
    assert refused(decide(other, FABRIC)) == (403, "cross_origin")
    assert refused(decide(dataclasses.replace(other, websocket=True, method="GET"), OPEN)) == (
        403,
        "cross_origin",
    )


def test_public_and_forwarded_callers_get_reads_and_inference_only() -> None:
    public = facts(peer=PeerClass.PUBLIC, host="203.0.113.1")
    assert decide(public, OPEN) is Caller.OTHER
    assert refused(decide(public, FABRIC)) == (403, "untrusted_peer")
    assert refused(decide(public, LOOPBACK)) == (403, "loopback_required")
    proxied = facts(forwarded="x-forwarded-for")
    assert decide(proxied, OPEN) is Caller.OTHER
    assert refused(decide(proxied, FABRIC)) == (403, "forwarded_request")
    assert refused(decide(proxied, LOOPBACK)) == (403, "forwarded_request")


def test_a_refusal_says_whether_it_refused_a_read_or_a_change() -> None:
    public = facts(peer=PeerClass.PUBLIC, host="203.0.113.1")
    read = decide(dataclasses.replace(public, method="GET"), FABRIC)
    change = decide(dataclasses.replace(public, method="POST"), FABRIC)
    assert isinstance(read, Refusal) and isinstance(change, Refusal)
    assert read.message.startswith("this read is accepted only")
    assert "a caller on a public address is not trusted" in read.message
    assert change.message.startswith("this change is accepted only")
    loopback_only = decide(dataclasses.replace(public, method="GET", websocket=True), LOOPBACK)
    assert isinstance(loopback_only, Refusal)
    assert loopback_only.message.startswith("this connection is accepted only")


def test_a_loopback_caller_with_a_lan_origin_cannot_use_loopback_only_routes() -> None:
    page = facts(origin="http://10.0.0.5", origin_is_own=True, origin_class=PeerClass.PRIVATE_LAN)
    assert refused(decide(page, LOOPBACK)) == (403, "cross_origin")
    assert (
        decide(
            facts(
                origin="http://localhost:52415", origin_is_own=True, origin_class=PeerClass.LOOPBACK
            ),
            LOOPBACK,
        )
        is Caller.LOOPBACK
    )


def test_api_keys_are_required_from_every_caller_not_on_this_machine() -> None:
    lan = facts(peer=PeerClass.PRIVATE_LAN, host="10.0.0.5", api_keys_configured=True)
    assert refused(decide(lan, OPEN)) == (401, "invalid_api_key")
    assert refused(decide(lan, FABRIC)) == (401, "invalid_api_key")
    assert decide(dataclasses.replace(lan, api_key_valid=True), OPEN) is Caller.TRUSTED_FABRIC
    assert decide(facts(api_keys_configured=True), OPEN) is Caller.LOOPBACK


def test_the_operator_gateway_has_already_checked_its_bearer() -> None:
    relayed = facts(peer=PeerClass.LOOPBACK, host="evil.example", host_is_own=False, operator=True)
    assert decide(relayed, LOOPBACK) is Caller.OPERATOR


def test_the_service_bearer_opens_only_the_routes_that_take_it() -> None:
    service = facts(peer=PeerClass.PRIVATE_LAN, host="10.0.0.5", service_bearer=True)
    assert decide(service, ADD_CARD) is Caller.SERVICE_BEARER
    assert refused(decide(service, LOOPBACK)) == (403, "loopback_required")
    assert refused(decide(dataclasses.replace(service, service_bearer=False), ADD_CARD)) == (
        403,
        "loopback_required",
    )


STORE = RouteAuthority(Requirement.STORE_PEER)
STORE_IMPORT = RouteAuthority(Requirement.STORE_LOOPBACK)


def test_the_store_port_serves_cluster_peers_and_no_browser() -> None:
    lan = facts(peer=PeerClass.PRIVATE_LAN, host="10.0.0.2")
    assert decide(lan, STORE) is Caller.TRUSTED_FABRIC
    assert decide(facts(peer=PeerClass.CGNAT), STORE) is Caller.TRUSTED_FABRIC
    assert refused(decide(facts(peer=PeerClass.PUBLIC), STORE)) == (403, "untrusted_peer")
    assert refused(decide(facts(forwarded="x-forwarded-for"), STORE)) == (
        403,
        "forwarded_request",
    )
    # Any Origin, even this node's own and even on a read: the store serves no page.
    own_page = facts(method="GET", has_body=False, origin="http://127.0.0.1", origin_is_own=True)
    assert refused(decide(own_page, STORE)) == (403, "cross_origin")
    assert refused(decide(facts(host_is_own=False), STORE)) == (421, "misdirected_host")
    assert refused(decide(facts(content_type="text/plain"), STORE)) == (
        415,
        "unsupported_media_type",
    )
    # A node's body without a Content-Type is taken; a page's never comes without Origin.
    assert decide(facts(content_type=None), STORE) is Caller.LOOPBACK
    # API keys guard the API port, not the fabric.
    keyed = facts(peer=PeerClass.PRIVATE_LAN, api_keys_configured=True)
    assert decide(keyed, STORE) is Caller.TRUSTED_FABRIC


def test_store_imports_are_for_this_machine() -> None:
    assert decide(LOCAL, STORE_IMPORT) is Caller.LOOPBACK
    lan = facts(peer=PeerClass.PRIVATE_LAN)
    assert refused(decide(lan, STORE_IMPORT)) == (403, "loopback_required")
