"""The node's log file on its own: bounded by rotation, owner-only, secrets blanked."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_core.config import ApiConfig, ClusterConfig, SkulkConfig
from skulk_daemon.system.logs import (
    LOG_FILE_BACKUPS,
    REDACTED,
    Redactor,
    log_file_handler,
    node_secrets,
)

MAX_BYTES = 16 * 1024
CLUSTER_KEY = "cluster-key-that-must-stay-secret-0001"
API_KEY = "sk-api-key-never-in-the-log-000000001"


@pytest.fixture
def logger(tmp_path: Path) -> Iterator[logging.Logger]:
    handler = log_file_handler(tmp_path / "skulk.log", max_bytes=MAX_BYTES)
    config = SkulkConfig(cluster=ClusterConfig(key=CLUSTER_KEY), api=ApiConfig(keys=(API_KEY,)))
    handler.addFilter(Redactor(node_secrets(config, env={})))
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logging.getLogger(f"skulk.test-log-file.{tmp_path.name}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    yield log
    log.removeHandler(handler)
    handler.close()


def test_rotation_bounds_the_files_and_keeps_them_owner_only(
    logger: logging.Logger, tmp_path: Path
) -> None:
    for number in range(2_000):
        logger.info("line %05d %s", number, "x" * 100)

    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["skulk.log", *(f"skulk.log.{n}" for n in range(1, LOG_FILE_BACKUPS + 1))]
    for path in tmp_path.iterdir():
        assert path.stat().st_size <= MAX_BYTES
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The newest line is in the current file; the oldest ones are gone.
    assert "line 01999" in (tmp_path / "skulk.log").read_text()
    assert not any("line 00000" in p.read_text() for p in tmp_path.iterdir())


def test_secrets_and_credentials_are_blanked(logger: logging.Logger, tmp_path: Path) -> None:
    logger.warning("joined with key %s", CLUSTER_KEY)
    logger.info("Authorization: Bearer abcdefghijklmnop1234 from %s", "10.0.0.2")
    logger.info("GET /hub?token=hf_abcdefghijklmnopqrstuvwxyz&x=1")
    try:
        raise ValueError(f"refused {API_KEY}")
    except ValueError:
        logger.exception("a request failed")

    text = (tmp_path / "skulk.log").read_text()
    for secret in (CLUSTER_KEY, API_KEY, "abcdefghijklmnop1234", "hf_abcdefghijklmnopqrstuvwxyz"):
        assert secret not in text
    assert text.count(REDACTED) >= 4
    assert "from 10.0.0.2" in text and "&x=1" in text
