"""Foxlight relay provisioning files, validated exactly (spec: "Operator Device Pairing").

Two generated schemas. Version one: ``app_websocket_url``, ``gateway_websocket_url``,
``routing_locator``, distinct ``app_carrier_credential`` / ``gateway_carrier_credential``
and optional ``lane_count`` (default four). Version two keeps the app URL, locator and
role credentials, replaces the gateway/lane fields with ``gateway_control_websocket_url``
and ``gateway_data_websocket_url`` and adds the delegated connector authority
(``connector_authority_private_key_pkcs8``, ``connector_authority_key_id``,
``connector_region``, ``connector_authority_epoch``).

The spec requires "exact fixed carrier paths" without naming them; Skulk fixes them here
(:data:`APP_CARRIER_PATH` and friends) and refuses any other path, query, fragment or
userinfo. Every error names the field and never echoes its value: the whole file is a
secret.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    load_der_private_key,
    load_pem_private_key,
)

from skulk_core.operator.bounds import is_loopback_host

APP_CARRIER_PATH: Final = "/v1/app"
GATEWAY_CARRIER_PATH: Final = "/v1/gateway"
GATEWAY_CONTROL_PATH: Final = "/v2/gateway/control"
GATEWAY_DATA_PATH: Final = "/v2/gateway/data"

DEFAULT_LANE_COUNT: Final = 4
MAX_LANE_COUNT: Final = 64  # the version-two data-lane ceiling; v1 lanes stay within it
MAX_PROVISIONING_BYTES: Final = 64 * 1024
_MAX_URL = 2048
_MAX_SECRET = 1024
_MAX_LABEL = 256
# Opaque tokens: printable ASCII without spaces, so they survive JSON, QR and headers.
_TOKEN = re.compile(r"[\x21-\x7e]+")


class ProvisioningError(ValueError):
    """The provisioning file was refused. The message names a field, never a value."""


Credential = Annotated[str, msgspec.Meta(min_length=1, max_length=_MAX_SECRET)]
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=_MAX_LABEL)]
Url = Annotated[str, msgspec.Meta(min_length=1, max_length=_MAX_URL)]


class _Schema(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def __repr__(self) -> str:
        # NOTE: provisioning holds carrier credentials and a signing key; a repr must not.
        return f"{type(self).__name__}(version={self.version}, ...)"  # type: ignore[attr-defined]


class RelayProvisioningV1(_Schema, frozen=True, kw_only=True):
    version: Literal[1]
    app_websocket_url: Url
    gateway_websocket_url: Url
    routing_locator: Label
    app_carrier_credential: Credential
    gateway_carrier_credential: Credential
    lane_count: Annotated[int, msgspec.Meta(ge=1, le=MAX_LANE_COUNT)] = DEFAULT_LANE_COUNT


class RelayProvisioningV2(_Schema, frozen=True, kw_only=True):
    version: Literal[2]
    app_websocket_url: Url
    routing_locator: Label
    app_carrier_credential: Credential
    gateway_carrier_credential: Credential
    gateway_control_websocket_url: Url
    gateway_data_websocket_url: Url
    connector_authority_private_key_pkcs8: Annotated[str, msgspec.Meta(min_length=1)]
    connector_authority_key_id: Label
    connector_region: Label
    connector_authority_epoch: Annotated[int, msgspec.Meta(ge=0)]


RelayProvisioning = RelayProvisioningV1 | RelayProvisioningV2


def parse_provisioning(raw: bytes) -> RelayProvisioning:
    """Validate a provisioning file's bytes; raise :class:`ProvisioningError` naming the field."""
    if len(raw) > MAX_PROVISIONING_BYTES:
        raise ProvisioningError(f"the provisioning file exceeds {MAX_PROVISIONING_BYTES} bytes")
    try:
        document = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise ProvisioningError("the provisioning file is not valid JSON") from None
    if not isinstance(document, dict):
        raise ProvisioningError("the provisioning file must be a JSON object")
    version = document.get("version")
    schema: type[RelayProvisioningV1] | type[RelayProvisioningV2]
    if version == 1 and type(version) is int:
        schema = RelayProvisioningV1
    elif version == 2 and type(version) is int:
        schema = RelayProvisioningV2
    else:
        raise ProvisioningError("field 'version' must be 1 or 2")
    try:
        provisioning = msgspec.convert(document, schema, strict=True)
    except msgspec.ValidationError as exc:
        raise ProvisioningError(_describe(exc)) from None
    _check(provisioning)
    return provisioning


def _describe(exc: msgspec.ValidationError) -> str:
    # msgspec's messages name the expected type or bound and the path, never the value
    # (the only value it echoes, an enum's, is the version, checked before this).
    message, _, where = str(exc).partition(" - at `")
    if "unknown field `" in message:
        return f"unknown field '{message.split('`')[1]}'"
    if "missing required field `" in message:
        return f"missing field '{message.split('`')[1]}'"
    field = where.rstrip("`").removeprefix("$").lstrip(".")
    return f"field '{field}': {message[:1].lower()}{message[1:]}"


def _check(p: RelayProvisioning) -> None:
    check_carrier_url("app_websocket_url", p.app_websocket_url, APP_CARRIER_PATH)
    if isinstance(p, RelayProvisioningV1):
        check_carrier_url("gateway_websocket_url", p.gateway_websocket_url, GATEWAY_CARRIER_PATH)
    else:
        check_carrier_url(
            "gateway_control_websocket_url", p.gateway_control_websocket_url, GATEWAY_CONTROL_PATH
        )
        check_carrier_url(
            "gateway_data_websocket_url", p.gateway_data_websocket_url, GATEWAY_DATA_PATH
        )
        _check_token("connector_authority_key_id", p.connector_authority_key_id)
        _check_token("connector_region", p.connector_region)
        connector_authority_key(p)
    _check_token("routing_locator", p.routing_locator)
    _check_token("app_carrier_credential", p.app_carrier_credential)
    _check_token("gateway_carrier_credential", p.gateway_carrier_credential)
    if p.app_carrier_credential == p.gateway_carrier_credential:
        raise ProvisioningError(
            "fields 'app_carrier_credential' and 'gateway_carrier_credential' must differ"
        )


def _check_token(field: str, value: str) -> None:
    if not _TOKEN.fullmatch(value):
        raise ProvisioningError(f"field '{field}' must be printable ASCII without spaces")


def check_carrier_url(field: str, url: str, path: str) -> None:
    """``wss://host[:port]<path>`` exactly (``ws://`` only to loopback); names ``field``."""
    if any(ord(ch) <= 32 or ord(ch) >= 127 for ch in url):
        raise ProvisioningError(f"field '{field}' must be a printable ASCII URL")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError:
        raise ProvisioningError(f"field '{field}' is not a valid URL") from None
    if not host or parts.scheme not in ("wss", "ws"):
        raise ProvisioningError(f"field '{field}' must be a wss:// URL")
    if parts.scheme == "ws" and not is_loopback_host(host):
        raise ProvisioningError(f"field '{field}' must use wss:// (ws:// is for loopback only)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ProvisioningError(f"field '{field}' must not carry credentials")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ProvisioningError(f"field '{field}' must not have a query or fragment")
    if parts.path != path:
        raise ProvisioningError(f"field '{field}' must use the fixed carrier path {path}")


def connector_authority_key(p: RelayProvisioningV2) -> Ed25519PrivateKey:
    """The delegated connector signing key: PKCS#8 as PEM, or base64/base64url DER."""
    field = "connector_authority_private_key_pkcs8"
    text = p.connector_authority_private_key_pkcs8.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = load_pem_private_key(text.encode("ascii"), password=None)
        else:
            compact = text.replace("-", "+").replace("_", "/")
            der = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
            key = load_der_private_key(der, password=None)
    except (ValueError, TypeError, UnicodeEncodeError, binascii.Error):
        raise ProvisioningError(f"field '{field}' is not a PKCS#8 private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ProvisioningError(f"field '{field}' must be an Ed25519 key")
    return key
