"""The ``skulk://pair?...`` package a gateway shows as a QR code and a device scans.

Version one (a direct legacy session) keeps the uncompressed shape: each field is its own
query parameter. Versions two (a legacy session with relay admission) and three (a
reusable invitation) are bounded compact JSON, zlib-compressed, base64url-encoded into the
single ``z`` parameter. A package never carries a gateway-role carrier credential nor an
access or refresh token: the types below have no field that could hold one.
"""

from __future__ import annotations

import re
import uuid
import zlib
from typing import Annotated, Final
from urllib.parse import parse_qsl, quote

import msgspec

from skulk_core.operator.bounds import (
    CLUSTER_NAME_MAX,
    INVITATION_MAX_PAIRINGS,
    INVITATION_MIN_PAIRINGS,
    normalize_cluster_name,
    validate_exchange_url,
)
from skulk_core.operator.encoding import b64url_decode, b64url_encode
from skulk_core.operator.relay import APP_CARRIER_PATH, check_carrier_url

SCHEME_PREFIX: Final = "skulk://pair?"

# NOTE: the budget. Terminals draw a QR code with one character column per module (two
# modules per text row with half-block characters), so a symbol is 17 + 4 * version
# modules wide plus its quiet zone. Version 20 (97 modules: ~101-105 columns by ~51-53
# rows) is the largest that still fits a typical maximized laptop terminal while keeping
# each module a full character cell, which phone cameras resolve reliably. At error
# correction L (a screen is not a scuffed sticker) version 20 holds 858 bytes in byte
# mode, and the whole URI is byte-mode data (base64url has lowercase letters), so the
# budget bounds the URI's length in characters with a little headroom. Typical sizes:
# a direct v1 package ~260 characters (version 10); a v2/v3 package with relay admission
# ~400-450 (version 13-14, inside an 80-column terminal).
QR_PAYLOAD_BUDGET: Final = 850
QR_ERROR_CORRECTION: Final = "L"
# Decompression bomb guard: a package that inflates beyond this is refused.
MAX_INFLATED_BYTES: Final = 8 * QR_PAYLOAD_BUDGET

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")

Secret = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{43}$")]
Fingerprint = Annotated[str, msgspec.Meta(pattern=r"^sha256:[A-Za-z0-9_-]{43}$")]
_UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
Uuid = Annotated[str, msgspec.Meta(pattern=_UUID_PATTERN)]
ClusterName = Annotated[str, msgspec.Meta(min_length=1, max_length=CLUSTER_NAME_MAX)]
Opaque = Annotated[str, msgspec.Meta(min_length=1, max_length=1024, pattern=r"^[\x21-\x7e]+$")]
UnixTime = Annotated[int, msgspec.Meta(ge=0, le=2**40)]
Pairings = Annotated[int, msgspec.Meta(ge=INVITATION_MIN_PAIRINGS, le=INVITATION_MAX_PAIRINGS)]


class PackageTooLarge(ValueError):
    """The package would exceed :data:`QR_PAYLOAD_BUDGET`; nothing should be persisted."""


class InvalidPackage(ValueError):
    """A scanned or pasted payload is not a well-formed pairing package."""


class _Struct(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    rename="camel",
    omit_defaults=True,
):
    pass


class RelayAdmission(_Struct, frozen=True, kw_only=True):
    """App-role relay admission and the inner TLS server name (never the gateway role)."""

    app_websocket_url: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
    routing_locator: Opaque
    app_carrier_credential: Opaque
    # The inner TLS is pinned by the package's ``fingerprint``; the full certificate
    # arrives in the exchange response (``remoteAccess.gatewayCaCertificatePem``).
    inner_tls_server_name: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]

    def __repr__(self) -> str:
        return "RelayAdmission(...)"


class _Package(_Struct, frozen=True, kw_only=True, tag_field="v"):
    cluster_id: Uuid
    cluster_name: ClusterName
    fingerprint: Fingerprint
    nonce: Secret
    expires_at: UnixTime
    exchange_url: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]

    def __repr__(self) -> str:
        # NOTE: the nonce is a bearer capability; keep it out of reprs and logs.
        return f"{type(self).__name__}(cluster_id={self.cluster_id!r}, nonce=<redacted>)"


class DirectPackage(_Package, frozen=True, kw_only=True, tag=1):
    """Version one: a direct legacy session, uncompressed query parameters."""


class SessionPackage(_Package, frozen=True, kw_only=True, tag=2):
    """Version two: a legacy session carried compressed, with relay admission."""

    relay: RelayAdmission | None = None


class InvitationPackage(_Package, frozen=True, kw_only=True, tag=3):
    """Version three: a reusable, revocable invitation."""

    invitation_id: Uuid
    issued_at: UnixTime
    max_pairings: Pairings
    relay: RelayAdmission | None = None


PairingPackage = DirectPackage | SessionPackage | InvitationPackage

_COMPRESSED_ENCODER = msgspec.json.Encoder()
_COMPRESSED_DECODER = msgspec.json.Decoder(SessionPackage | InvitationPackage)
_DIRECT_FIELDS: Final = (
    "clusterId",
    "clusterName",
    "fingerprint",
    "nonce",
    "expiresAt",
    "exchangeUrl",
)


def encode_pairing_uri(p: PairingPackage) -> str:
    """The ``skulk://pair?...`` text for ``p``.

    Raises :class:`PackageTooLarge` when the URI would exceed :data:`QR_PAYLOAD_BUDGET`
    (callers check this before persisting anything) and :class:`InvalidPackage` when
    ``p`` would not decode back to itself (an out-of-bounds field).
    """
    if isinstance(p, DirectPackage):
        values = (
            p.cluster_id,
            p.cluster_name,
            p.fingerprint,
            p.nonce,
            str(p.expires_at),
            p.exchange_url,
        )
        query = "&".join(
            f"{name}={quote(value, safe='')}"
            for name, value in zip(("v", *_DIRECT_FIELDS), ("1", *values), strict=True)
        )
    else:
        compressed = zlib.compress(_COMPRESSED_ENCODER.encode(p), 9)
        query = "z=" + b64url_encode(compressed)
    uri = SCHEME_PREFIX + query
    if len(uri) > QR_PAYLOAD_BUDGET:
        raise PackageTooLarge(
            f"the pairing package is {len(uri)} characters, over the "
            f"{QR_PAYLOAD_BUDGET}-character terminal QR budget"
        )
    if decode_pairing_uri(uri) != p:
        raise InvalidPackage("the pairing package does not round-trip")
    return uri


def decode_pairing_uri(uri: str) -> PairingPackage:
    """Parse and validate a pairing payload.

    Refuses (with :class:`InvalidPackage`, never echoing the payload) anything over the
    budget, another scheme, unknown or repeated parameters, a version other than one in
    the query or two/three in ``z``, bad base64url, trailing or over-long zlib data, and
    any field outside its bounds.
    """
    if not isinstance(uri, str) or len(uri) > QR_PAYLOAD_BUDGET:
        raise InvalidPackage("the pairing package is missing or over the size budget")
    uri = uri.strip()
    if not uri.startswith(SCHEME_PREFIX) or not uri.isascii():
        raise InvalidPackage("not a skulk://pair package")
    try:
        pairs = parse_qsl(uri[len(SCHEME_PREFIX) :], keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise InvalidPackage("the pairing package's query is malformed") from None
    params = dict(pairs)
    if len(params) != len(pairs):
        raise InvalidPackage("the pairing package repeats a parameter")
    package: PairingPackage
    if set(params) == {"z"}:
        package = _decode_compressed(params["z"])
    elif params.get("v") == "1" and set(params) == {"v", *_DIRECT_FIELDS}:
        package = _decode_direct(params)
    elif "v" in params and params["v"] != "1":
        raise InvalidPackage("unsupported pairing package version")
    else:
        raise InvalidPackage("the pairing package has missing or unknown parameters")
    _check_semantics(package)
    return package


def _decode_direct(params: dict[str, str]) -> DirectPackage:
    expires = params["expiresAt"]
    if not re.fullmatch(r"(0|[1-9][0-9]{0,12})", expires):
        raise InvalidPackage("the pairing package's expiresAt is not a Unix time")
    document: dict[str, object] = {name: params[name] for name in _DIRECT_FIELDS}
    document["expiresAt"] = int(expires)
    document["v"] = 1
    try:
        return msgspec.convert(document, DirectPackage, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidPackage(_field_error(exc)) from None


def _decode_compressed(text: str) -> SessionPackage | InvitationPackage:
    try:
        compressed = b64url_decode(text)
    except ValueError:
        raise InvalidPackage("the pairing package's z parameter is not base64url") from None
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(compressed, MAX_INFLATED_BYTES + 1)
    except zlib.error:
        raise InvalidPackage("the pairing package is not zlib data") from None
    if len(raw) > MAX_INFLATED_BYTES or inflater.unconsumed_tail:
        raise InvalidPackage("the pairing package inflates beyond its bound")
    if not inflater.eof or inflater.unused_data:
        raise InvalidPackage("the pairing package's zlib stream is truncated or has trailing data")
    try:
        return _COMPRESSED_DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        if str(exc).endswith("- at `$.v`"):
            raise InvalidPackage("unsupported pairing package version") from None
        raise InvalidPackage(_field_error(exc)) from None
    except msgspec.DecodeError:
        raise InvalidPackage("the pairing package is not JSON") from None


def _field_error(exc: msgspec.ValidationError) -> str:
    # msgspec names the path and the bound, never the value: keep only the path.
    message, _, where = str(exc).partition(" - at `")
    if "unknown field `" in message or "missing required field `" in message:
        return f"the pairing package has a missing or unknown field '{message.split('`')[1]}'"
    field = where.rstrip("`").removeprefix("$").lstrip(".")
    if not field:
        return "the pairing package is not a JSON object of the expected shape"
    return f"the pairing package's field '{field}' is invalid"


def _check_semantics(p: PairingPackage) -> None:
    try:
        validate_exchange_url(p.exchange_url)
    except ValueError as exc:
        raise InvalidPackage(f"the pairing package's exchangeUrl is refused: {exc}") from None
    try:
        if normalize_cluster_name(p.cluster_name) != p.cluster_name:
            raise ValueError
    except ValueError:
        raise InvalidPackage("the pairing package's clusterName is not normalized") from None
    if str(uuid.UUID(p.cluster_id)) != p.cluster_id:
        raise InvalidPackage("the pairing package's clusterId is not a canonical UUID")
    if isinstance(p, InvitationPackage) and p.issued_at > p.expires_at:
        raise InvalidPackage("the pairing package was issued after it expires")
    relay = None if isinstance(p, DirectPackage) else p.relay
    if relay is not None:
        _check_relay(relay)


def _check_relay(relay: RelayAdmission) -> None:
    try:
        check_carrier_url("appWebsocketUrl", relay.app_websocket_url, APP_CARRIER_PATH)
    except ValueError as exc:
        raise InvalidPackage(f"the pairing package's relay is refused: {exc}") from None
    if not _HOSTNAME.fullmatch(relay.inner_tls_server_name):
        raise InvalidPackage("the pairing package's innerTlsServerName is not a host name")
