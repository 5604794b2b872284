"""The settings this node runs with, and where each one came from.

``GET /config`` shows them in its ``effective.in_effect`` list and ``skulk config
show`` renders them, so an operator can tell why a port, the mDNS switch or the log
level is what it is. Every setting follows the same precedence: command-line flag,
then ``SKULK_*`` environment, then ``skulk.yaml``, then the built-in default. A value
read from the file that equals the built-in default is reported as ``default``: the
file only restates it (``PUT /config`` writes every key, changed or not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from skulk_core.config import ClusterConfig, LoggingConfig, SkulkConfig
from skulk_core.effective import EffectiveSetting, SettingValue, Source
from skulk_daemon.fabric.setup import FABRIC_PORT_ENV, MDNS_ENV, PEERS_ENV
from skulk_daemon.node.config_store import KV_CACHE_ENV
from skulk_daemon.system.settings import (
    DEFAULT_OPERATOR_API_PORT,
    Settings,
)

LOG_LEVEL_ENV = "SKULK_LOG_LEVEL"


class StartFlags(msgspec.Struct, frozen=True, kw_only=True):
    """The daemon flags that were given (``None``/empty: not given)."""

    host: str | None = None
    api_port: int | None = None
    operator_api_port: int | None = None
    data_dir: str | None = None
    models_dir: str | None = None
    config_home: str | None = None
    fabric_port: int | None = None
    peers: tuple[str, ...] = ()
    no_mdns: bool = False
    log_level: str | None = None


def _origin(flag: object, env_name: str, env: Mapping[str, str]) -> Source | None:
    if flag is not None and flag is not False and flag != ():
        return Source.FLAG
    if env.get(env_name, "").strip():
        return Source.ENV
    return None


def _file_or_default(value: object, default: object) -> Source:
    return Source.DEFAULT if value == default else Source.FILE


def in_effect(
    *,
    flags: StartFlags,
    settings: Settings,
    config: SkulkConfig,
    log_level: str,
    log_file: str | None,
    env: Mapping[str, str] | None = None,
) -> tuple[EffectiveSetting, ...]:
    """Every setting below, resolved as the daemon resolves it at start."""
    env = os.environ if env is None else env
    cluster = config.cluster
    rows: list[EffectiveSetting] = []

    def add(key: str, value: SettingValue, source: Source) -> None:
        rows.append(EffectiveSetting(key=key, value=value, source=source))

    add("api.host", settings.host, _origin(flags.host, "SKULK_HOST", env) or Source.DEFAULT)
    add(
        "api.port",
        settings.api_port,
        _origin(flags.api_port, "SKULK_API_PORT", env) or Source.DEFAULT,
    )
    add(
        "operator.api_port",
        DEFAULT_OPERATOR_API_PORT
        if settings.operator_api_port is None
        else settings.operator_api_port,
        _origin(flags.operator_api_port, "SKULK_OPERATOR_API_PORT", env) or Source.DEFAULT,
    )
    fabric_port = _origin(flags.fabric_port, FABRIC_PORT_ENV, env)
    add(
        "cluster.fabric_port",
        flags.fabric_port
        if fabric_port is Source.FLAG
        else int(env[FABRIC_PORT_ENV])
        if fabric_port is Source.ENV
        else cluster.fabric_port,
        fabric_port or _file_or_default(cluster.fabric_port, ClusterConfig().fabric_port),
    )
    add("cluster.mdns", *_mdns(flags, cluster, env))
    add("cluster.peers", *_peers(flags, cluster, env))
    level_source = _origin(flags.log_level, LOG_LEVEL_ENV, env)
    add(
        "logging.level",
        log_level,
        level_source or _file_or_default(config.logging.level, LoggingConfig().level),
    )
    add("logging.file", log_file, Source.DEFAULT)
    kv_env = env.get(KV_CACHE_ENV, "").strip()
    kv_file = config.inference.kv_cache_backend.value
    add(
        "inference.kv_cache_backend",
        kv_env or kv_file,
        Source.ENV if kv_env else _file_or_default(kv_file, "default"),
    )
    add(
        "paths.config",
        str(settings.config_path),
        _origin(flags.config_home, "SKULK_CONFIG_HOME", env) or Source.DEFAULT,
    )
    add(
        "paths.data_dir",
        str(settings.data_dir),
        _origin(flags.data_dir, "SKULK_DATA_DIR", env) or Source.DEFAULT,
    )
    configured_models = config.model_store.models_dir
    add(
        "paths.models_dir",
        str(settings.models_dir(configured_models)),
        _origin(flags.models_dir, "SKULK_MODELS_DIR", env)
        or (Source.FILE if configured_models else Source.DEFAULT),
    )
    return tuple(rows)


def _mdns(flags: StartFlags, cluster: ClusterConfig, env: Mapping[str, str]) -> tuple[bool, Source]:
    # Mirrors resolve_fabric: --no-mdns, then SKULK_MDNS, then cluster.mdns.
    if flags.no_mdns:
        return False, Source.FLAG
    raw = env.get(MDNS_ENV, "").strip()
    if raw:
        return raw.lower() not in ("0", "false", "no", "off") and cluster.mdns, Source.ENV
    return cluster.mdns, _file_or_default(cluster.mdns, ClusterConfig().mdns)


def _peers(
    flags: StartFlags, cluster: ClusterConfig, env: Mapping[str, str]
) -> tuple[list[str], Source]:
    # Peers from all three places are merged; the source names the first that has any.
    from_env = [p.strip() for p in env.get(PEERS_ENV, "").split(",") if p.strip()]
    merged = list(dict.fromkeys([*flags.peers, *from_env, *cluster.peers]))
    if flags.peers:
        return merged, Source.FLAG
    if from_env:
        return merged, Source.ENV
    return merged, Source.FILE if cluster.peers else Source.DEFAULT
