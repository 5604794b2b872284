"""The daemon's logging: the level ``logging.level`` names, on stderr and in a file.

The file is ``<data dir>/logs/skulk.log``, owner-only (it names models, peers and
paths), rotated at :data:`LOG_FILE_MAX_BYTES` with :data:`LOG_FILE_BACKUPS` older
files kept, so it is bounded at about 20 MiB. ``skulk logs`` reads it. Both outputs
pass through :class:`Redactor`, which blanks the secrets this node holds and
credential-shaped text, in case a message or a traceback ever carries one.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from skulk_core.config import SkulkConfig
from skulk_host.fsutil import ensure_private_dir

LOG_DIR: Final = "logs"
LOG_FILE_NAME: Final = "skulk.log"
LOG_FILE_MAX_BYTES: Final = 5 * 1024 * 1024
LOG_FILE_BACKUPS: Final = 3
LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OWNER_ONLY_FILE: Final = 0o600
REDACTED: Final = "[redacted]"
# Shorter values are not worth hunting for (and would blank ordinary words).
MIN_SECRET_LENGTH: Final = 8
RUNNER_LOG_LEVEL_ENV: Final = "SKULK_RUNNER_LOG_LEVEL"
"""How the daemon hands its level to the runners it spawns (they log to its stderr)."""

# Libraries that are chatty at DEBUG about their own internals (every socket event,
# every header frame); at debug they stay at INFO so the node's own lines stand out.
QUIET_LIBRARIES: Final = ("asyncio", "httpcore", "hpack", "multipart", "zeroconf", "filelock")

# Credential-shaped text: a bearer header, a Hugging Face token, a token in a query.
_PATTERNS: Final = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"(?i)([?&](?:token|key|api_key|access_token|nonce)=)[^&\s\"']+"),
)


def log_file_path(data_dir: Path) -> Path:
    return data_dir / LOG_DIR / LOG_FILE_NAME


class Redactor(logging.Filter):
    """Rewrites each record's text with secrets blanked before any handler writes it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = sorted(
            {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True
        )

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.lastindex else "") + REDACTED, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not format: leave the record to logging
            return True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = self.scrub(message), None
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        return True


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """A rotating file created owner-only, whatever the umask (and each rotation too)."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, OWNER_ONLY_FILE)
        os.fchmod(fd, OWNER_ONLY_FILE)
        return io.TextIOWrapper(
            io.FileIO(fd, "a"), encoding=self.encoding, errors=self.errors, write_through=True
        )


def log_file_handler(path: Path, max_bytes: int = LOG_FILE_MAX_BYTES) -> logging.Handler:
    """The owner-only file at ``path``, rotated past ``max_bytes`` into ``path.1`` to
    ``path.3`` (the oldest dropped)."""
    return _PrivateRotatingFile(
        path, maxBytes=max_bytes, backupCount=LOG_FILE_BACKUPS, encoding="utf-8"
    )


def configure_logging(
    level: str, data_dir: Path | None, secrets: Iterable[str] = ()
) -> Path | None:
    """Log at ``level`` (``debug``...``error``) to stderr and, with a ``data_dir``, to
    the rotating file there. Returns the file's path, or ``None`` when it could not be
    opened (said on stderr: the node still runs, logging to stderr only)."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    redactor = Redactor(secrets)
    formatter = logging.Formatter(LOG_FORMAT)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    path: Path | None = None
    if data_dir is not None:
        path = log_file_path(data_dir)
        try:
            # The data dir first: mkdir would create a missing parent world-readable.
            ensure_private_dir(data_dir)
            ensure_private_dir(path.parent)
            handlers.append(log_file_handler(path))
        except OSError as exc:
            print(f"skulk: not writing a log file at {path}: {exc}", file=sys.stderr)
            path = None
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        handler.addFilter(redactor)
        root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(numeric, logging.INFO))
    os.environ[RUNNER_LOG_LEVEL_ENV] = level.lower()
    return path


def set_level(level: str) -> None:
    """Log at ``level`` from now on (the cluster's logging settings changed)."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    logging.getLogger().setLevel(numeric)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(numeric, logging.INFO))
    os.environ[RUNNER_LOG_LEVEL_ENV] = level.lower()


_SECRET_ENV_NAME: Final = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)S?$")


def node_secrets(config: SkulkConfig, env: Mapping[str, str] | None = None) -> list[str]:
    """The secrets this node holds: the config's and its secret-named variables'."""
    env = os.environ if env is None else env
    found = [
        config.hf_token or "",
        config.cluster.key or "",
        config.browser_tools.search_api_key or "",
        *config.api.keys,
    ]
    for name, value in env.items():
        if name.startswith(("SKULK_", "HF_")) and _SECRET_ENV_NAME.search(name):
            found += value.split(",")
    return [value for value in found if value]


def runner_log_level() -> int:
    """The level a runner logs at: the daemon's (see :data:`RUNNER_LOG_LEVEL_ENV`)."""
    raw = os.environ.get(RUNNER_LOG_LEVEL_ENV, "info").upper()
    return logging.getLevelNamesMapping().get(raw, logging.INFO)
