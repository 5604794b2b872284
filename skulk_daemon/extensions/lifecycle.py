"""The extensions' lifetime on a node: load at start, ``on_start``, ``on_stop``.

:class:`ExtensionHost` is what ``serve.py`` holds. It loads the installed extensions
(``loader.py``), builds the one :class:`ExtensionContext` they share, registers each
with the capability fabric (which serves the ones that are providers), and owns the
chat middleware runner the chat routes use.

- :meth:`ExtensionHost.start` runs every ``on_start(context)`` once serving begins, on
  the serving loop, concurrently. Start-up waits for them at most
  :data:`ON_START_WAIT_SECONDS`; one still running after that goes on in the
  background (and is cancelled at shutdown) rather than holding the node.
- :meth:`ExtensionHost.stop` closes capability discovery first, then runs every
  ``on_stop()`` concurrently under one shared :data:`SHUTDOWN_BUDGET_SECONDS` budget,
  shielded from the cancellation of the shutdown that awaits it. Hooks still running
  when the budget is spent are cancelled and the node exits anyway.

A hook that raises is logged and skipped; it never stops the node.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from skulk_daemon.extensions.context import ExtensionContext, in_process_embedder
from skulk_daemon.extensions.loader import LoadedExtension, load_extensions
from skulk_daemon.extensions.middleware import ChatMiddlewareRunner, NamedMiddleware
from skulk_daemon.plugins.configuration import NodeConfigurations

if TYPE_CHECKING:
    from skulk_daemon.capabilities.service import CapabilityService
    from skulk_daemon.embeddings.service import EmbeddingService
    from skulk_daemon.node.node import Node

log = logging.getLogger("skulk.extensions")

SHUTDOWN_BUDGET_SECONDS: Final = 30.0
"""One budget shared by every ``on_stop`` hook (they run concurrently)."""
ON_START_WAIT_SECONDS: Final = 10.0
"""How long start-up waits for ``on_start`` hooks before serving without them."""
CANCEL_GRACE_SECONDS: Final = 2.0
"""After the budget, how long cancelled hooks get to unwind before the node moves on."""
OBSERVER_DRAIN_SECONDS: Final = 5.0
"""At shutdown, how long response observers already running get to finish."""


@runtime_checkable
class SupportsExtensionShutdown(Protocol):
    """An extension that owns background work implements ``async on_stop()``.

    It runs once at API shutdown, after capability discovery has closed, concurrently
    with the other extensions' hooks under one shared 30-second budget. Cooperate with
    cancellation and move blocking work off the loop.
    """

    async def on_stop(self) -> None: ...


async def _await_hook(result: object) -> None:
    if inspect.isawaitable(result):
        await result


class ExtensionHost:
    """The loaded extensions, their shared context, and their lifetime hooks."""

    def __init__(
        self,
        extensions: Sequence[LoadedExtension],
        context: ExtensionContext,
        fabric: CapabilityService | None = None,
    ) -> None:
        self.extensions = tuple(extensions)
        self.context = context
        self._fabric = fabric
        self.chat = ChatMiddlewareRunner(
            [
                NamedMiddleware(extension.name, extension.middleware)
                for extension in self.extensions
                if extension.middleware is not None
            ],
            context,
        )
        self._started = False
        self._stopped = False
        self._starting: set[asyncio.Task[None]] = set()
        self._abandoned: tuple[str, ...] = ()

    @property
    def abandoned(self) -> tuple[str, ...]:
        """Extensions whose ``on_stop`` ignored its cancellation (still running)."""
        return self._abandoned

    @classmethod
    def open(
        cls,
        node: Node,
        embeddings: EmbeddingService,
        fabric: CapabilityService | None = None,
        *,
        builtins: Sequence[object] = (),
    ) -> ExtensionHost:
        """Load the installed extensions and register them with ``fabric``.

        ``builtins`` are first-party providers (``vad@1.0.0``): registered first, as
        built-ins, whether or not extension discovery is disabled.
        """
        context = ExtensionContext(node, fabric, in_process_embedder(embeddings))
        if fabric is not None:
            for provider in builtins:
                try:
                    fabric.register_extension(provider, context, builtin=True)
                except Exception:
                    log.exception("built-in provider %s could not be registered", provider)
        extensions = load_extensions()
        configurations = NodeConfigurations.for_node(node)
        for extension in extensions:
            configurations.add_in_process(extension.name, extension.obj)
        if fabric is not None:
            for extension in extensions:
                try:
                    fabric.register_extension(extension.obj, context)
                except Exception:
                    log.exception(
                        "extension %s: its capabilities could not be registered; it serves none",
                        extension.name,
                    )
        return cls(extensions, context, fabric)

    # -- start -----------------------------------------------------------------------

    async def _on_start(self, extension: LoadedExtension) -> None:
        hook: Any = getattr(extension.obj, "on_start", None)
        try:
            await _await_hook(hook(self.context))
        except Exception:
            log.exception("extension %s: on_start raised; skipped", extension.name)

    async def start(self) -> None:
        """Run each ``on_start(context)`` once; never raises."""
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        for extension in self.extensions:
            if callable(getattr(extension.obj, "on_start", None)):
                task = loop.create_task(self._on_start(extension))
                self._starting.add(task)
                task.add_done_callback(self._starting.discard)
        if not self._starting:
            return
        _, late = await asyncio.wait(set(self._starting), timeout=ON_START_WAIT_SECONDS)
        if late:
            log.warning(
                "%d extension on_start hook(s) still running after %.0f s; serving anyway",
                len(late),
                ON_START_WAIT_SECONDS,
            )

    # -- stop --------------------------------------------------------------------------

    async def _on_stop(self, extension: LoadedExtension) -> None:
        hook: Any = getattr(extension.obj, "on_stop", None)
        try:
            await _await_hook(hook())
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("extension %s: on_stop raised; skipped", extension.name)

    async def _run_stop_hooks(self, budget: float) -> None:
        named = {
            asyncio.create_task(self._on_stop(extension)): extension.name
            for extension in self.extensions
            if callable(getattr(extension.obj, "on_stop", None))
        }
        if not named:
            return
        _, late = await asyncio.wait(set(named), timeout=budget)
        if not late:
            return
        log.error(
            "extension on_stop hook(s) of %s still running after the %.0f s shutdown budget; "
            "cancelled",
            ", ".join(sorted(named[task] for task in late)),
            budget,
        )
        for task in late:
            task.cancel()
        _, stuck = await asyncio.wait(late, timeout=CANCEL_GRACE_SECONDS)
        # A hook that swallows its cancellation is left behind; serve.py exits anyway.
        self._abandoned = tuple(sorted(named[task] for task in stuck))

    async def _shutdown(self, budget: float) -> None:
        if self._fabric is not None:
            # Discovery closes first: no call is admitted into an extension that stops.
            try:
                await self._fabric.close()
            except Exception:
                log.exception("closing the capability fabric failed")
        for task in list(self._starting):
            task.cancel()
        await self._run_stop_hooks(budget)
        await self.chat.drain(OBSERVER_DRAIN_SECONDS)

    async def stop(self, budget: float | None = None) -> None:
        """Close discovery, then run every ``on_stop`` under one shared budget
        (:data:`SHUTDOWN_BUDGET_SECONDS` unless ``budget`` says otherwise)."""
        if self._stopped:
            return
        self._stopped = True
        # NOTE: the constant is read here, not bound as the default: a test that runs
        # the daemon with a shorter budget sets it on this module before serving.
        shutdown = asyncio.ensure_future(
            self._shutdown(SHUTDOWN_BUDGET_SECONDS if budget is None else budget)
        )
        # NOTE: shielded, so a shutdown that is itself cancelled (a second signal, the
        # lifespan giving up) does not cut the hooks' budget short: the hooks keep
        # their budget while the loop lives; only this wait ends.
        await asyncio.shield(shutdown)
