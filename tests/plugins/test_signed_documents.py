"""Signed releases, catalogs and publisher trust, verified as the host verifies them:
canonical bytes, Ed25519 signatures, trust revisions and revocations, validity periods,
the protocol window with its exact sentence, rollbacks and the metadata bound."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.plugins.canonical import NotCanonical, canonical_json
from skulk_core.plugins.documents import MAX_METADATA_BYTES, HostFacts, ProtocolWindow
from skulk_core.plugins.errors import PluginRefusal, ReleaseProtocolUnsupported
from skulk_core.plugins.trust import PublisherTrust, advance_trust, parse_trust
from skulk_core.plugins.verify import (
    advance_catalog_floor,
    advance_release_floor,
    check_host,
    matches_host,
    verify_catalog,
    verify_release,
)
from tests.plugins.kit import (
    DAY,
    NOW,
    Publisher,
    Wheel,
    build_wheel,
    catalog_document,
    catalog_entry,
    release_document,
    trust_document,
)

ACME = Publisher("acme")
OTHER = Publisher("other")
HOST = HostFacts(
    artifact_family="linux-glibc-x86_64", python_version="3.11.9", skulk_build_sha256="b" * 64
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Wheel:
    return build_wheel(tmp_path_factory.mktemp("wheels"))


def trust(*publishers: Publisher, **fields: Any) -> PublisherTrust:
    return parse_trust(trust_document(*(publishers or (ACME,)), **fields))


def reason(excinfo: pytest.ExceptionInfo[PluginRefusal]) -> str:
    return excinfo.value.reason


# -- canonical JSON --------------------------------------------------------------------


def test_canonical_json_is_sorted_compact_and_ascii() -> None:
    assert canonical_json({"b": [1, "é"], "a": None}) == b'{"a":null,"b":[1,"\\u00e9"]}'


@pytest.mark.parametrize("value", [{"x": 1.5}, {"x": float("nan")}, {1: "key"}, {"x": b"raw"}])
def test_canonical_json_refuses_what_two_encoders_could_disagree_on(value: Any) -> None:
    with pytest.raises(NotCanonical):
        canonical_json(value)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_canonical_json_round_trips(value: Any) -> None:
    assert canonical_json(json.loads(canonical_json(value))) == canonical_json(value)


# -- publisher trust -------------------------------------------------------------------


def test_trust_revisions_only_move_forward() -> None:
    held = advance_trust(None, trust(revision=2), NOW)
    assert advance_trust(held, trust(revision=2), NOW) is held  # identical: no change
    with pytest.raises(PluginRefusal, match="already held with other contents") as same:
        advance_trust(held, trust(ACME, OTHER, revision=2), NOW)
    with pytest.raises(PluginRefusal, match="restored older trust") as older:
        advance_trust(held, trust(revision=1), NOW)
    assert reason(same) == reason(older) == "trust_not_newer"
    assert advance_trust(held, trust(ACME, OTHER, revision=3), NOW).revision == 3


def test_expired_trust_is_refused() -> None:
    with pytest.raises(PluginRefusal) as caught:
        advance_trust(None, trust(expires_at=NOW - 1), NOW)
    assert reason(caught) == "trust_expired"


def test_a_revocation_can_never_be_removed(wheel: Wheel) -> None:
    held = advance_trust(
        None, trust(ACME, OTHER, revoked_publishers=("other",), revoked_artifacts=("c" * 64,)), NOW
    )
    # The next revision omits both revocations; the held trust keeps them anyway.
    later = advance_trust(held, trust(ACME, OTHER, revision=2), NOW)
    assert later.revoked_publishers == ("other",) and later.revoked_artifacts == ("c" * 64,)
    raw = OTHER.sign(release_document(OTHER, [wheel]))
    with pytest.raises(PluginRefusal, match="revoked") as caught:
        verify_release(raw, later, NOW)
    assert reason(caught) == "publisher_revoked"


@pytest.mark.parametrize(
    "document",
    [
        {"revision": 0, "expires_at": NOW + DAY, "publishers": {}},
        {"revision": 1, "expires_at": NOW + DAY, "publishers": {"acme": "zz"}},
        {"revision": 1, "expires_at": NOW + DAY, "publishers": {}, "extra": 1},
    ],
)
def test_malformed_trust_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(PluginRefusal) as caught:
        parse_trust(document)
    assert reason(caught) == "malformed"


# -- releases --------------------------------------------------------------------------


def test_a_signed_release_verifies_to_its_canonical_digest(wheel: Wheel) -> None:
    document = release_document(ACME, [wheel], sequence=3)
    verified = verify_release(ACME.sign(document), trust(), NOW)
    assert verified.runtime_digest == hashlib.sha256(canonical_json(document)).hexdigest()
    assert verified.claims.sequence == 3 and verified.claims.artifact_bytes == wheel.size
    check_host(verified.claims, HOST)


def test_a_tampered_release_fails_its_signature(wheel: Wheel) -> None:
    envelope = json.loads(ACME.sign(release_document(ACME, [wheel])))
    envelope["signed"]["runtime"]["wheels"][0]["sha256"] = "0" * 64
    with pytest.raises(PluginRefusal) as caught:
        verify_release(json.dumps(envelope).encode(), trust(), NOW)
    assert reason(caught) == "signature_mismatch"


def test_a_release_signed_by_another_key_is_refused(wheel: Wheel) -> None:
    impostor = Publisher("acme")  # same id, different key
    with pytest.raises(PluginRefusal, match="does not match publisher acme") as caught:
        verify_release(impostor.sign(release_document(impostor, [wheel])), trust(), NOW)
    assert reason(caught) == "signature_mismatch"


def test_an_unknown_publisher_is_refused(wheel: Wheel) -> None:
    with pytest.raises(PluginRefusal) as caught:
        verify_release(OTHER.sign(release_document(OTHER, [wheel])), trust(), NOW)
    assert reason(caught) == "publisher_untrusted"


@pytest.mark.parametrize(
    ("fields", "trust_fields", "expected"),
    [
        ({"expires_at": NOW - 1}, {}, "document_expired"),
        ({"created_at": NOW + DAY}, {}, "not_yet_valid"),
        ({}, {"expires_at": NOW - 1}, "trust_expired"),
    ],
)
def test_validity_periods_are_enforced(
    wheel: Wheel, fields: dict[str, Any], trust_fields: dict[str, Any], expected: str
) -> None:
    raw = ACME.sign(release_document(ACME, [wheel], **fields))
    with pytest.raises(PluginRefusal) as caught:
        verify_release(raw, trust(**trust_fields), NOW)
    assert reason(caught) == expected


def test_a_revoked_release_or_wheel_is_refused(wheel: Wheel) -> None:
    document = release_document(ACME, [wheel])
    digest = hashlib.sha256(canonical_json(document)).hexdigest()
    for revoked in (digest, wheel.sha256):
        with pytest.raises(PluginRefusal) as caught:
            verify_release(ACME.sign(document), trust(revoked_artifacts=(revoked,)), NOW)
        assert reason(caught) == "artifact_revoked"


def test_a_release_outside_the_protocol_window_gets_the_named_sentence(wheel: Wheel) -> None:
    raw = ACME.sign(release_document(ACME, [wheel], protocol=3))
    with pytest.raises(ReleaseProtocolUnsupported) as caught:
        verify_release(raw, trust(), NOW)
    refusal = caught.value
    assert refusal.code == "release_protocol_unsupported"
    assert refusal.wire() == {
        "code": "release_protocol_unsupported",
        "kind": "release",
        "offered": 3,
        "accepted": [1],
    }
    assert refusal.message == (
        "This host accepts release protocol 1, but this release offers protocol 3: "
        "update Skulk on this host, or choose a release published for it."
    )


def test_the_window_accepts_current_and_previous_only(wheel: Wheel) -> None:
    window = ProtocolWindow(current=3, previous=2)
    for protocol in (2, 3):
        raw = ACME.sign(release_document(ACME, [wheel], protocol=protocol))
        assert verify_release(raw, trust(), NOW, release_window=window).claims.protocol == protocol
    raw = ACME.sign(release_document(ACME, [wheel], runtime_protocol=1))
    with pytest.raises(ReleaseProtocolUnsupported) as caught:
        verify_release(
            raw, trust(), NOW, release_window=ProtocolWindow(current=1), runtime_window=window
        )
    assert (caught.value.kind, caught.value.offered, caught.value.accepted) == (
        "runtime",
        1,
        (3, 2),
    )
    assert "runtime protocols 3 and 2, but this runtime offers protocol 1" in caught.value.message


def test_metadata_is_bounded_to_128_kib_before_parsing(wheel: Wheel) -> None:
    raw = ACME.sign(release_document(ACME, [wheel]))
    at_bound = raw + b" " * (MAX_METADATA_BYTES - len(raw))
    assert verify_release(at_bound, trust(), NOW).claims.sequence == 1
    with pytest.raises(PluginRefusal) as caught:
        verify_release(at_bound + b" ", trust(), NOW)
    assert reason(caught) == "too_large"


@pytest.mark.parametrize(
    "change",
    [
        {
            "runtime": {
                "protocol": 1,
                "python_requires": ">=3.11",
                "wheels": [{"filename": "../x.whl", "sha256": "a" * 64, "bytes": 1}],
            }
        },
        {
            "runtime": {
                "protocol": 1,
                "python_requires": ">=3.11",
                "wheels": [{"filename": "sub/x.whl", "sha256": "a" * 64, "bytes": 1}],
            }
        },
        {"surprise": True},
        {"sequence": 0},
    ],
)
def test_malformed_signed_claims_are_refused(wheel: Wheel, change: dict[str, Any]) -> None:
    document = {**release_document(ACME, [wheel]), **change}
    with pytest.raises(PluginRefusal) as caught:
        verify_release(ACME.sign(document), trust(), NOW)
    assert reason(caught) == "malformed"


def test_host_compatibility(wheel: Wheel) -> None:
    arm = verify_release(
        ACME.sign(release_document(ACME, [wheel], platform="macos-arm64")), trust(), NOW
    )
    with pytest.raises(PluginRefusal) as platform:
        check_host(arm.claims, HOST)
    new_python = verify_release(
        ACME.sign(release_document(ACME, [wheel], python_requires=">=3.13")), trust(), NOW
    )
    with pytest.raises(PluginRefusal) as python:
        check_host(new_python.claims, HOST)
    assert (reason(platform), reason(python)) == ("platform_mismatch", "python_mismatch")


def test_release_rollback_and_equivocation_are_refused(wheel: Wheel, tmp_path: Path) -> None:
    def release(sequence: int, version: str = "1.0.0", bundle: str = "acme.tiny") -> Any:
        document = release_document(
            ACME, [wheel], sequence=sequence, version=version, bundle_id=bundle
        )
        return verify_release(ACME.sign(document), trust(), NOW)

    floor = advance_release_floor(None, release(2))
    assert advance_release_floor(floor, release(2)) == floor
    with pytest.raises(PluginRefusal, match="rollback") as lower:
        advance_release_floor(floor, release(1))
    with pytest.raises(PluginRefusal) as same:
        advance_release_floor(floor, release(2, version="2.0.0"))
    with pytest.raises(PluginRefusal) as bundle:
        advance_release_floor(floor, release(3, bundle="acme.other"))
    assert (reason(lower), reason(same), reason(bundle)) == (
        "rollback",
        "equivocation",
        "bundle_mismatch",
    )
    assert advance_release_floor(floor, release(3)).sequence == 3


# -- catalogs --------------------------------------------------------------------------


def catalog(wheel: Wheel, revision: int = 1, **fields: Any) -> tuple[bytes, str]:
    release = release_document(ACME, [wheel])
    digest = hashlib.sha256(canonical_json(release)).hexdigest()
    entry = catalog_entry(release, digest, "https://feed.example/acme/")
    return ACME.sign(catalog_document(ACME, [entry], revision=revision, **fields)), digest


def test_a_signed_catalog_lists_its_releases(wheel: Wheel) -> None:
    raw, digest = catalog(wheel)
    verified = verify_catalog(raw, trust(), NOW)
    (entry,) = verified.claims.entries
    assert entry.release_digest == digest and matches_host(entry, HOST)
    # A revoked release (or its artifact) is left out of the listing, not shown.
    assert verify_catalog(raw, trust(revoked_artifacts=(digest,)), NOW).claims.entries == ()
    assert verify_catalog(raw, trust(revoked_artifacts=(wheel.sha256,)), NOW).claims.entries == ()


def test_catalog_refusals(wheel: Wheel) -> None:
    raw, _ = catalog(wheel)
    tampered = raw.replace(b'"revision": 1', b'"revision": 9')
    with pytest.raises(PluginRefusal) as signature:
        verify_catalog(tampered, trust(), NOW)
    with pytest.raises(PluginRefusal) as untrusted:
        verify_catalog(raw, trust(OTHER), NOW)
    with pytest.raises(PluginRefusal) as expired:
        verify_catalog(catalog(wheel, expires_at=NOW - 1)[0], trust(), NOW)
    with pytest.raises(
        PluginRefusal, match="catalog protocol 1, but this catalog offers protocol 2"
    ) as protocol:
        verify_catalog(catalog(wheel, protocol=2)[0], trust(), NOW)
    assert [reason(c) for c in (signature, untrusted, expired, protocol)] == [
        "signature_mismatch",
        "publisher_untrusted",
        "document_expired",
        "protocol_unsupported",
    ]
    assert (
        expired.value.message
        == "The catalog is outside its validity period, or the host clock is wrong."
    )


def test_a_rolled_back_catalog_is_refused(wheel: Wheel) -> None:
    floor = advance_catalog_floor(None, verify_catalog(catalog(wheel, revision=2)[0], trust(), NOW))
    older = verify_catalog(catalog(wheel, revision=1)[0], trust(), NOW)
    other_at_same = verify_catalog(
        catalog(wheel, revision=2, expires_at=NOW + 2 * DAY)[0], trust(), NOW
    )
    for offered in (older, other_at_same):
        with pytest.raises(
            PluginRefusal, match="older than the one the host already accepted"
        ) as caught:
            advance_catalog_floor(floor, offered)
        assert reason(caught) == "rollback"
    newer = verify_catalog(catalog(wheel, revision=3)[0], trust(), NOW)
    assert advance_catalog_floor(floor, newer).revision == 3
