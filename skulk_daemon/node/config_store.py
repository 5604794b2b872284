"""``skulk.yaml`` on disk: strict load, atomic owner-only save, env-resolved effective values."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import yaml

from skulk_core.config import (
    ConfigError,
    SkulkConfig,
    kv_cache_in_effect,
    parse_config,
    to_document,
)
from skulk_core.effective import EffectiveSetting
from skulk_core.models.kv_cache import KvCacheBackend
from skulk_host.fsutil import atomic_write

_TRUE = {"1", "true", "yes", "on"}
KV_CACHE_ENV = "SKULK_KV_CACHE_BACKEND"


def kv_cache_for(config: SkulkConfig) -> KvCacheBackend:
    """The KV cache type this node's llama.cpp runners get under ``config``: the
    ``SKULK_KV_CACHE_BACKEND`` override, else the file's. Raises :class:`ConfigError`
    for an override that names no type or that needs the flash attention ``config``
    turns off (checked at start, and by ``PUT /config``)."""
    return kv_cache_in_effect(
        config.inference, os.environ.get(KV_CACHE_ENV), override_name=KV_CACHE_ENV
    )


class EffectiveConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Runtime-resolved values that are not part of the persisted file (``GET /config``)."""

    kv_cache_backend: str
    has_hf_token: bool
    experimental_mode_enabled: bool
    offline: bool
    models_dir: str
    data_dir: str
    event_log_enabled: bool
    in_effect: tuple[EffectiveSetting, ...] = ()
    """The settings this node started with and where each came from (flag, env,
    file, default); a change to ``skulk.yaml`` shows here after a restart."""


def load_config_file(path: Path) -> SkulkConfig:
    """Read and validate ``skulk.yaml``; a missing file is the default config."""
    if not path.exists():
        return SkulkConfig()
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    try:
        return parse_config(document)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


class ConfigStore:
    def __init__(self, path: Path, config: SkulkConfig) -> None:
        self.path = path
        self._config = config
        # Set once at start by the daemon (serve.py), which resolved them.
        self.in_effect: tuple[EffectiveSetting, ...] = ()

    @classmethod
    def load(cls, path: Path) -> ConfigStore:
        return cls(path, load_config_file(path))

    @property
    def config(self) -> SkulkConfig:
        return self._config

    def save(self, config: SkulkConfig) -> None:
        """Persist atomically with mode 0600 (the file may hold tokens)."""
        text = yaml.safe_dump(_prune_none(to_document(config)), sort_keys=False)
        atomic_write(self.path, text.encode("utf-8"))
        self._config = config

    def effective(self, models_dir: Path, data_dir: Path) -> EffectiveConfig:
        env = os.environ
        return EffectiveConfig(
            kv_cache_backend=kv_cache_for(self._config).value,
            has_hf_token=bool(self._config.hf_token or env.get("HF_TOKEN")),
            experimental_mode_enabled=env.get("SKULK_ENABLE_EXPERIMENTAL_MODE", "").lower()
            in _TRUE,
            offline=env.get("SKULK_OFFLINE", "").lower() in _TRUE,
            models_dir=str(models_dir),
            data_dir=str(data_dir),
            event_log_enabled=self._config.logging.event_log,
            in_effect=self.in_effect,
        )


def _prune_none(value: object) -> object:
    if isinstance(value, dict):
        return {k: _prune_none(v) for k, v in value.items() if v is not None}
    return value
