"""Where this node keeps things and how it listens, resolved once at start.

Precedence: command-line flag, then environment, then ``skulk.yaml``, then the XDG
default. Every path can be overridden so several nodes can share one machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_API_PORT = 52415
# The operator listener (loopback TLS, bearer-only); 0 asks the kernel for a free port.
# Without a flag or env the port stored by ``skulk operator configure-relay`` applies.
DEFAULT_OPERATOR_API_PORT = 52417
DEFAULT_HOST = "0.0.0.0"


def _xdg(env_name: str, fallback: str) -> Path:
    value = os.environ.get(env_name)
    return Path(value) if value else Path.home() / fallback


@dataclass(frozen=True, slots=True)
class Settings:
    host: str
    api_port: int
    config_home: Path
    data_dir: Path
    models_dir_override: Path | None
    operator_api_port: int | None = None

    @property
    def config_path(self) -> Path:
        return self.config_home / "skulk.yaml"

    @property
    def identity_key_path(self) -> Path:
        return self.data_dir / "node_key.pem"

    @property
    def install_id_path(self) -> Path:
        return self.data_dir / "node_install_id"

    @property
    def onboarding_marker_path(self) -> Path:
        return self.data_dir / "onboarding_completed"

    @property
    def event_log_path(self) -> Path:
        return self.data_dir / "events.log"

    def models_dir(self, configured: str | None) -> Path:
        """The models dir: flag/``SKULK_MODELS_DIR``, else ``model_store.models_dir``, else data."""
        if self.models_dir_override is not None:
            return self.models_dir_override
        if configured:
            return Path(configured).expanduser()
        return self.data_dir / "models"


def _port(raw: str, source: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{source} must be a port number, got {raw!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"{source} must be between 1 and 65535, got {port}")
    return port


def _operator_port(raw: str | None, source: str) -> int | None:
    if raw is None or raw == "":
        return None
    return 0 if raw.strip() == "0" else _port(raw, source)


def resolve_settings(
    *,
    host: str | None = None,
    api_port: int | None = None,
    config_home: str | None = None,
    data_dir: str | None = None,
    models_dir: str | None = None,
    operator_api_port: int | None = None,
) -> Settings:
    env = os.environ
    if api_port is None:
        raw = env.get("SKULK_API_PORT")
        api_port = _port(raw, "SKULK_API_PORT") if raw else DEFAULT_API_PORT
    else:
        api_port = _port(str(api_port), "--api-port")
    if operator_api_port is None:
        operator_port = _operator_port(
            env.get("SKULK_OPERATOR_API_PORT"), "SKULK_OPERATOR_API_PORT"
        )
    else:
        operator_port = _operator_port(str(operator_api_port), "--operator-api-port")
    models = models_dir or env.get("SKULK_MODELS_DIR")
    return Settings(
        host=host or env.get("SKULK_HOST") or DEFAULT_HOST,
        api_port=api_port,
        config_home=Path(config_home).expanduser()
        if config_home
        else _xdg("SKULK_CONFIG_HOME", ".config/skulk"),
        data_dir=Path(data_dir).expanduser()
        if data_dir
        else _xdg("SKULK_DATA_DIR", ".local/share/skulk"),
        models_dir_override=Path(models).expanduser() if models else None,
        operator_api_port=operator_port,
    )
