"""``skulk.shared.types.text_generation``: the normalized chat request a middleware
transforms. ``TextGenerationTaskParams`` is ``skulk.extensions.ChatTaskParams`` (a
frozen dataclass: change it with ``dataclasses.replace`` and return the copy);
``TextGenerationMessage`` is one of its messages."""

from skulk_daemon.extensions import ChatMessage, ChatTaskParams

TextGenerationTaskParams = ChatTaskParams
TextGenerationMessage = ChatMessage

__all__ = ["TextGenerationMessage", "TextGenerationTaskParams"]
