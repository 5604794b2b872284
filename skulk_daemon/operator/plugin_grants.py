"""Plugin grants: the explicit ``plugins:*`` scopes an owner gives one paired device.

Pairing never grants a plugin scope (``skulk_core.operator.scopes.PAIRED_SCOPES``);
the direct owner replaces a device's plugin scopes under that device's grant revision,
keeping its other scopes. An empty list revokes every plugin grant. Tokens read the
device record on every request, so a change applies to existing tokens at once.
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_daemon.operator.errors import Conflict, Invalid, Unknown
from skulk_daemon.operator.state import AuthorityState, DeviceRecord

PLUGINS_READ: Final = "plugins:read"
PLUGINS_MANAGE: Final = "plugins:manage"
PLUGINS_APPROVE: Final = "plugins:approve"
PLUGIN_SCOPES: Final = (PLUGINS_READ, PLUGINS_MANAGE, PLUGINS_APPROVE)


class PluginGrant(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One row of ``GET /v1/auth/plugin-grants``: no credential material."""

    device_id: str
    device_name: str
    revision: int
    scopes: list[str]
    active: bool


class PluginGrants(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/auth/plugin-grants``: every paired device's row."""

    devices: list[PluginGrant]


def _grant(device: DeviceRecord, now: float) -> PluginGrant:
    expires = device.refresh_expires_at
    return PluginGrant(
        device_id=device.device_id,
        device_name=device.device_name,
        revision=device.plugin_grant_revision,
        scopes=[s for s in PLUGIN_SCOPES if s in device.scopes],
        active=device.revoked_at is None and expires is not None and now < expires,
    )


def list_grants(state: AuthorityState, now: float) -> list[PluginGrant]:
    ordered = sorted(state.devices.values(), key=lambda d: d.paired_at)
    return [_grant(device, now) for device in ordered]


def replace(
    state: AuthorityState, device_id: str, expected_revision: int, scopes: list[str], now: float
) -> PluginGrant:
    if len(set(scopes)) != len(scopes) or not set(scopes) <= set(PLUGIN_SCOPES):
        raise Invalid(
            "scopes must be a list of distinct values from plugins:read, plugins:manage "
            "and plugins:approve"
        )
    device = state.devices.get(device_id)
    if device is None:
        raise Unknown("no paired device has that id")
    if expected_revision != device.plugin_grant_revision:
        raise Conflict(
            f"expectedRevision {expected_revision} is not this device's grant revision "
            f"{device.plugin_grant_revision}: reload the grants before changing them"
        )
    kept = [s for s in device.scopes if s not in PLUGIN_SCOPES]
    device.scopes = kept + [s for s in PLUGIN_SCOPES if s in scopes]
    device.plugin_grant_revision += 1
    return _grant(device, now)
