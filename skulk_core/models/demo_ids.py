"""The ids of the demo models a node installs from Python packages at its first start.

Known to the CLI as well as the daemon: a removed demo stays removed until it is added
back by its id (``skulk models add <id>``), which the CLI says when it removes one.
The daemon's installers for them are :data:`skulk_daemon.models.demos.DEMO_INSTALLERS`.
"""

from __future__ import annotations

from typing import Final

from skulk_core.ids import ModelId

PACKAGED_DEMO_IDS: Final = frozenset(
    {
        ModelId("local/gemma-3-270m-q4_k_m"),
        ModelId("local/all-minilm-l6-v2"),
        ModelId("local/whisper-tiny.en"),
        ModelId("local/piper-en-us-joe-medium"),
        ModelId("local/gemma-3-270m-mlx-4bit"),
    }
)
