"""The Litestar application class the node serves with: Litestar less its pydantic plugins.

Litestar adds its pydantic plugins whenever pydantic is importable (it is here, for
other libraries), and importing them costs about 0.16 CPU-s, a tenth of a node's start
(issue 43). No route of this API takes or returns a pydantic model (every wire is a
msgspec Struct), so the node keeps Litestar's other default plugins (msgspec's
dependency plugin, and attrs' schema plugin where attrs is installed) and leaves the
pydantic ones out. ``tests/daemon/test_startup_imports.py`` holds that pydantic stays
unloaded by a started app.
"""

from __future__ import annotations

from contextlib import suppress

from litestar import Litestar
from litestar.exceptions import MissingDependencyException
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin


class LeanLitestar(Litestar):
    """:class:`~litestar.Litestar` whose default plugins leave out pydantic's."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        # NOTE: Litestar's own list (litestar/app.py, 2.x) less its pydantic branch.
        plugins.append(MsgspecDIPlugin())
        with suppress(MissingDependencyException):
            from litestar.plugins.attrs import AttrsSchemaPlugin  # noqa: PLC0415

            if not any(isinstance(plugin, AttrsSchemaPlugin) for plugin in plugins):
                plugins.append(AttrsSchemaPlugin())
        return plugins
