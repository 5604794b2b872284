"""The connection types this app's handlers receive, spelled once.

The app installs no authentication middleware and sets no custom user, so a
connection's ``user`` and ``auth`` are ``None``; its state is Litestar's plain
:class:`~litestar.datastructures.State`. Litestar injects a handler's connection by
the parameter's name (``request``, ``socket``), so these aliases only say what it is.
"""

from __future__ import annotations

from typing import TypeAlias

from litestar import Request, WebSocket
from litestar.datastructures import State

HttpRequest: TypeAlias = Request[None, None, State]
"""An HTTP request on this app."""
HttpSocket: TypeAlias = WebSocket[None, None, State]
"""A WebSocket connection on this app."""
