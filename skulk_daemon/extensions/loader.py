"""Discover and load extensions: entry points in the ``skulk.extensions`` group.

An extension is any installed distribution that registers a zero-argument factory
(usually a class) in that group. At start-up every entry point found is imported,
version-checked and constructed, and each one is logged as loaded or refused with the
reason. A refusal is never fatal: an extension that fails to import, to construct, or
whose ``skulk_requires`` does not match the running Skulk is left out and the node
serves as if it were not installed. ``SKULK_EXTENSIONS_DISABLE=1`` skips discovery.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Final

from skulk_core.version import SKULK_VERSION
from skulk_daemon.extensions.middleware import BaseChatMiddleware

log = logging.getLogger("skulk.extensions")

ENTRY_POINT_GROUP: Final = "skulk.extensions"
DISABLE_ENV: Final = "SKULK_EXTENSIONS_DISABLE"
MAX_NAME_CHARS: Final = 64
"""An extension's ``name`` is a short label for logs."""


@dataclass(frozen=True, slots=True)
class LoadedExtension:
    """One extension that passed every check, constructed and ready."""

    name: str
    """The extension's own ``name`` (unique among the loaded ones)."""
    distribution: str
    """``<distribution> <version>`` that registered the entry point."""
    obj: object
    """What the entry point's factory returned."""
    middleware: BaseChatMiddleware | None = None
    """``obj.chat_middleware()``, when it has one."""


class Refusal(Exception):
    """Raised inside the loader to refuse one entry point with a reason."""


def disabled() -> bool:
    """Whether ``SKULK_EXTENSIONS_DISABLE`` turns discovery off."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _distribution(ep: EntryPoint) -> str:
    dist = ep.dist
    if dist is None:
        return "an unknown distribution"
    return f"{dist.name} {dist.version}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_requires(requires: object, version: str) -> None:
    """Refuse unless ``requires`` is a PEP 440 specifier that ``version`` satisfies."""
    # NOTE: packaging loads where an extension is installed, not at every start (issue 43).
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # noqa: PLC0415
    from packaging.version import InvalidVersion, Version  # noqa: PLC0415

    if not isinstance(requires, str) or not requires.strip():
        raise Refusal("it declares no skulk_requires (a PEP 440 specifier such as '>=0.1,<1')")
    try:
        spec = SpecifierSet(requires)
    except InvalidSpecifier:
        raise Refusal(f"skulk_requires {requires!r} is not a PEP 440 specifier") from None
    try:
        running = Version(version)
    except InvalidVersion:
        raise Refusal(f"the running Skulk version {version!r} cannot be compared") from None
    # NOTE: prereleases count: a development build must be able to load its extensions.
    if not spec.contains(running, prereleases=True):
        raise Refusal(f"it requires Skulk {requires} but this node runs Skulk {version}")


def _check_name(name: object, taken: set[str]) -> str:
    if not isinstance(name, str) or not name.strip():
        raise Refusal("it has no name (a short string attribute `name`)")
    if len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise Refusal(f"its name must be printable and at most {MAX_NAME_CHARS} characters")
    if name in taken:
        raise Refusal(f"another loaded extension is already named {name!r}")
    return name


def _middleware(obj: object) -> BaseChatMiddleware | None:
    factory = getattr(obj, "chat_middleware", None)
    if factory is None:
        return None
    if not callable(factory):
        raise Refusal("chat_middleware is not a method")
    try:
        middleware = factory()
    except Exception as exc:
        raise Refusal(f"chat_middleware() raised {_describe(exc)}") from None
    if middleware is None:
        return None
    if not isinstance(middleware, BaseChatMiddleware):
        raise Refusal(
            f"chat_middleware() returned {type(middleware).__name__}, not a BaseChatMiddleware"
        )
    return middleware


def load_entry_point(ep: EntryPoint, taken: set[str], version: str) -> LoadedExtension:
    """Import, check and construct one entry point; raises :class:`Refusal`."""
    try:
        factory = ep.load()
    # NOTE: SystemExit too: an extension calling sys.exit() at import must not stop
    # the node (KeyboardInterrupt still does).
    except (Exception, SystemExit) as exc:
        raise Refusal(f"importing {ep.value} raised {_describe(exc)}") from None
    if not callable(factory):
        raise Refusal(f"{ep.value} is not a factory (a class or zero-argument callable)")
    # A class declares its contract before it is constructed: a mismatch never runs it.
    declared = getattr(factory, "skulk_requires", None) if isinstance(factory, type) else None
    if declared is not None:
        check_requires(declared, version)
    try:
        obj = factory()
    except (Exception, SystemExit) as exc:
        raise Refusal(f"constructing {ep.value} raised {_describe(exc)}") from None
    check_requires(getattr(obj, "skulk_requires", None), version)
    name = _check_name(getattr(obj, "name", None), taken)
    return LoadedExtension(
        name=name,
        distribution=_distribution(ep),
        obj=obj,
        middleware=_middleware(obj),
    )


def discovered() -> list[EntryPoint]:
    """Every entry point in the group, in a stable order (by name, then value)."""
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: (ep.name, ep.value))


def load_extensions(
    found: Iterable[EntryPoint] | None = None, *, version: str = SKULK_VERSION
) -> list[LoadedExtension]:
    """Load every extension found (default: the installed entry points).

    Logs one line per entry point, loaded or refused with the reason; returns the
    loaded ones. An empty list when ``SKULK_EXTENSIONS_DISABLE`` is set.
    """
    if disabled():
        log.info("extensions disabled (%s=1): entry points not discovered", DISABLE_ENV)
        return []
    try:
        candidates = list(discovered() if found is None else found)
    except Exception:
        log.exception("extension discovery failed; serving without extensions")
        return []
    loaded: list[LoadedExtension] = []
    taken: set[str] = set()
    for ep in candidates:
        try:
            extension = load_entry_point(ep, taken, version)
        except Refusal as refusal:
            log.error("extension %s (%s) refused: %s", ep.name, _distribution(ep), refusal.args[0])
            continue
        taken.add(extension.name)
        loaded.append(extension)
        log.info(
            "extension %s (%s, entry point %s) loaded%s",
            extension.name,
            extension.distribution,
            ep.name,
            " with chat middleware" if extension.middleware is not None else "",
        )
    if not candidates:
        log.info("no extensions installed (entry point group %s)", ENTRY_POINT_GROUP)
    return loaded
