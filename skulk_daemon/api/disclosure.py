"""What a public caller may read of this host: the one place the open reads that carry
host-local facts (absolute paths, the config file's location, LAN and tailnet
addresses) are cut down for a caller outside the trusted classes.

A caller of the trusted classes (:data:`~skulk_daemon.api.authority.TRUSTED_CALLERS`:
this machine, the private network, the operator gateway) sees every value; any other
caller gets the same fields with those values blanked (``""`` for a path, ``None`` for
an address), so a client reads one shape whoever it is.
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.cluster.remote_access import LocalAccess, RemoteAccess, TailscaleAccess
from skulk_core.effective import hide_paths
from skulk_core.store.answers import NodeStorage
from skulk_core.wire import JsonValue
from skulk_daemon.api.authority import TRUSTED_CALLERS, caller_of
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.node.config_store import EffectiveConfig

HIDDEN_PATH: Final = ""
CONFIG_PATH_KEYS: Final = (
    ("model_store", "models_dir"),
    ("model_store", "store_path"),
    ("registry", "root"),
)
"""Settings whose values are paths on this host."""


def is_trusted(request: HttpRequest) -> bool:
    return caller_of(request) in TRUSTED_CALLERS


def storage_for(request: HttpRequest, storage: NodeStorage) -> NodeStorage:
    """``GET /store/storage``: artifact and models-dir paths blanked for a public caller."""
    if is_trusted(request):
        return storage
    artifacts = [msgspec.structs.replace(a, path=HIDDEN_PATH) for a in storage.artifacts]
    return msgspec.structs.replace(storage, artifacts=artifacts, models_dir=HIDDEN_PATH)


def config_for(request: HttpRequest, config: dict[str, object]) -> dict[str, object]:
    """``GET /config``'s settings with host paths blanked for a public caller."""
    if is_trusted(request):
        return config
    shown = dict(config)
    for section, key in CONFIG_PATH_KEYS:
        values = shown.get(section)
        if isinstance(values, dict) and values.get(key):
            shown[section] = {**values, key: HIDDEN_PATH}
    return shown


def effective_for(request: HttpRequest, effective: EffectiveConfig) -> EffectiveConfig:
    """``GET /config``'s effective values with the models and data dirs blanked for a
    public caller."""
    if is_trusted(request):
        return effective
    return msgspec.structs.replace(
        effective,
        models_dir=HIDDEN_PATH,
        data_dir=HIDDEN_PATH,
        in_effect=hide_paths(effective.in_effect, HIDDEN_PATH),
    )


def remote_access_for(request: HttpRequest, access: RemoteAccess) -> RemoteAccess:
    """``GET /v1/connectivity/remote-access`` without addresses for a public caller
    (whether tailscale runs, and the port, stay)."""
    if is_trusted(request):
        return access
    return RemoteAccess(
        local=LocalAccess(ip=None, port=access.local.port, url=None),
        tailscale=TailscaleAccess(
            running=access.tailscale.running,
            ip=None,
            dns_name=None,
            port=access.tailscale.port,
            url=None,
        ),
        preferred_url=None,
        operator_url=None,
    )


def identity_address_for(request: HttpRequest, address: str, hostname: str) -> str:
    """``GET /node/identity``'s ``ipAddress``: for a public caller, the hostname (what
    the route reports when the node has no non-loopback address), never a LAN one."""
    return address if is_trusted(request) else hostname


def state_for(request: HttpRequest, document: dict[str, JsonValue]) -> None:
    """``GET /state`` for a public caller: no node's API URLs (``nodeResources[*].apiUrls``
    name LAN and tailnet addresses; the diagnostics fan-out, which needs them, is for
    the trusted fabric)."""
    if is_trusted(request):
        return
    resources = document.get("nodeResources")
    if isinstance(resources, dict):
        for reading in resources.values():
            if isinstance(reading, dict) and "apiUrls" in reading:
                reading["apiUrls"] = []
