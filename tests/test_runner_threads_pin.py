"""The suite's test nodes run their runners on one thread unless their own
``skulk.yaml`` says otherwise: ``pin_runner_threads`` is what makes that so."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.daemon_process import pin_runner_threads


def _pinned(tmp_path: Path, text: str | None) -> str:
    config = tmp_path / "config" / "skulk.yaml"
    if text is not None:
        config.parent.mkdir(parents=True)
        config.write_text(text, encoding="utf-8")
    pin_runner_threads(config, 1)
    return config.read_text(encoding="utf-8")


def test_a_missing_file_gets_the_setting(tmp_path: Path) -> None:
    assert yaml.safe_load(_pinned(tmp_path, None)) == {"inference": {"runner_threads": 1}}


def test_a_tests_settings_are_kept_whatever_their_layout(tmp_path: Path) -> None:
    flow = "node: {friendly_name: alpha}\ninference: {kv_cache_backend: q8_0}\n"
    assert yaml.safe_load(_pinned(tmp_path, flow)) == {
        "node": {"friendly_name": "alpha"},
        "inference": {"kv_cache_backend": "q8_0", "runner_threads": 1},
    }
    block = "inference:\n    kv_cache_backend: f16\nlogging:\n  level: debug\n"
    assert yaml.safe_load(_pinned(tmp_path / "b", block)) == {
        "inference": {"kv_cache_backend": "f16", "runner_threads": 1},
        "logging": {"level": "debug"},
    }


def test_a_file_that_sets_threads_or_that_the_daemon_refuses_is_left_alone(
    tmp_path: Path,
) -> None:
    for n, text in enumerate(
        [
            "inference:\n  runner_threads: 2\n",
            "inference:\n  runner_threads: null\n",
            "- not\n- a mapping\n",
            "inference: [1, 2]\n",
            "node: {friendly_name: [unclosed\n",
        ]
    ):
        assert _pinned(tmp_path / str(n), text) == text
