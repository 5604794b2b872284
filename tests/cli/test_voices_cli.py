"""`skulk voices` at 80 columns: the model id, which `skulk say MODEL` takes, is whole."""

from __future__ import annotations

from .fake_node import FakeNode
from .test_cli import plain, run

PIPER = "local/piper-en-us-joe-medium"
VOICE = {
    "id": "joe",
    "name": "Joe (US English, medium)",
    "model": PIPER,
    "kind": "builtin",
    "preferred_languages": ["en-US"],
}


def test_voices_show_the_whole_model_id_at_80_columns(node: FakeNode) -> None:
    node.routes[("GET", "/v1/audio/voices")] = (200, {"object": "list", "data": [VOICE]})

    result = run("--api-url", node.url, "voices", PIPER, env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert PIPER in out and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
