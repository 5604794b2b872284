"""POST /v1/messages (Anthropic Claude Messages)."""

from __future__ import annotations

from litestar import Controller


class ClaudeMessagesController(Controller):
    tags = ("Claude",)
