"""Node configuration through one door: in-process ``NodeConfigurationProvider``
extensions and managed owners (through their socket adapter) alike.

:class:`NodeConfigurations` is per node (:meth:`NodeConfigurations.for_node`): the
extension host adds the loaded extensions that implement the facet (plugin id = the
extension's entry-point name); the managed owners come from
:class:`~skulk_daemon.plugins.owners.adapter.ManagedOwners`. Every dispatch shares one
eight-request bound (a ninth is refused at once, never queued) and a thirty-second
deadline. Answers are checked before they leave: the exact node, the declared types
and bounds (configuration 128 KiB, credential metadata 64 KiB), no write-only or
password fields in an ordinary schema. A configuration mutation is fenced here too
(revision and schema digest read first, then the provider checks again); a credential
mutation goes to the provider first so that an exact operation id replay returns the
retained result. Provider exception text never leaves; credential values are never
logged, kept or answered.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import msgspec

from skulk_core.extensions.node_setup import (
    MAX_SETUP_RESPONSE_BYTES,
    NodePreflight,
    NodeSetup,
)
from skulk_core.extensions.proposals import (
    MAX_PROPOSAL_RESPONSE_BYTES,
    ProposalPage,
    ProposalReference,
    ProposalReview,
)
from skulk_core.plugins.answers import InventoryEntry, described_node
from skulk_core.plugins.node_configuration import (
    MAX_CONFIGURATION_BYTES,
    MAX_CREDENTIAL_METADATA_BYTES,
    MAX_NODES_PER_PROVIDER,
    MAX_PROVIDERS,
    ConfigurableNode,
    NodeConfiguration,
    NodeConfigurationMutation,
    NodeConfigurationRefused,
    NodeConfigurationResult,
    NodeCredentialMutation,
    NodeCredentials,
    UnknownNode,
)
from skulk_host.plugin_owners import wire

if TYPE_CHECKING:
    from skulk_daemon.plugins.owners.adapter import ManagedOwner, ManagedOwners

log = logging.getLogger(__name__)

MAX_IN_FLIGHT: Final = 8
DEADLINE_SECONDS: Final = 30.0

T = TypeVar("T", NodeConfiguration, NodeCredentials)
Observed = TypeVar("Observed", NodePreflight, NodeSetup)
Reviewed = TypeVar("Reviewed", ProposalPage, ProposalReview)
Failure = Literal["not_found", "refused", "malformed", "busy", "unavailable", "timeout"]


class ConfigurationFailure(Exception):
    """Why a configuration request was not answered; ``kind`` maps to the status."""

    def __init__(self, kind: Failure, message: str) -> None:
        super().__init__(message)
        self.kind: Failure = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class InProcess:
    plugin_id: str
    provider: object


def declares_secret(schema: object) -> bool:
    """Whether a JSON schema declares a write-only or password field anywhere."""
    if isinstance(schema, dict):
        if schema.get("writeOnly") is True or schema.get("format") == "password":
            return True
        return any(declares_secret(v) for v in schema.values())
    if isinstance(schema, list):
        return any(declares_secret(v) for v in schema)
    return False


def _bounded(value: msgspec.Struct, limit: int) -> None:
    if len(msgspec.json.encode(value)) > limit:
        raise ConfigurationFailure("unavailable", "the provider's answer is over its bound")


_registries: weakref.WeakKeyDictionary[object, NodeConfigurations] = weakref.WeakKeyDictionary()


class NodeConfigurations:
    def __init__(self) -> None:
        self._in_process: dict[str, InProcess] = {}
        self.owners: ManagedOwners | None = None
        self._in_flight = 0

    @classmethod
    def for_node(cls, node: object) -> NodeConfigurations:
        """The one registry of ``node`` (shared by its extension host and its API)."""
        found = _registries.get(node)
        if found is None:
            found = _registries[node] = cls()
        return found

    def add_in_process(self, plugin_id: str, provider: object) -> bool:
        """Add a loaded extension if it implements the configuration facet."""
        facet = ("configuration_nodes", "node_configuration", "configure_node")
        if not all(callable(getattr(provider, name, None)) for name in facet):
            return False
        self._in_process.setdefault(plugin_id, InProcess(plugin_id, provider))
        return True

    def attach_owners(self, owners: ManagedOwners) -> None:
        self.owners = owners

    # -- bounded dispatch ----------------------------------------------------------------

    async def _run(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """Start ``make()`` only once a slot is free (none is queued)."""
        if self._in_flight >= MAX_IN_FLIGHT:
            raise ConfigurationFailure("busy", "plugin management is saturated; retry shortly")
        self._in_flight += 1
        try:
            return await asyncio.wait_for(_awaitable(make()), DEADLINE_SECONDS)
        except TimeoutError:
            raise ConfigurationFailure("timeout", "the provider did not answer in time") from None
        except UnknownNode:
            raise ConfigurationFailure("not_found", "no such installed node") from None
        except NodeConfigurationRefused as refusal:
            raise ConfigurationFailure(
                "refused", str(refusal) or "the provider refused the change"
            ) from None
        except ConfigurationFailure:
            raise
        except wire.OwnerError as refused:
            raise _from_owner(refused) from None
        except wire.OwnerUnavailable as lost:
            kind: Failure = "timeout" if lost.timed_out else "unavailable"
            message = f"the plugin owner is unavailable: {lost.message}"
            raise ConfigurationFailure(kind, message) from None
        except Exception as exc:
            log.warning("a configuration provider raised %s", type(exc).__name__)
            raise ConfigurationFailure("unavailable", "the provider failed") from None
        finally:
            self._in_flight -= 1

    async def dispatch(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """Run one provider request under the shared bound and deadline."""
        return await self._run(make)

    def target(self, plugin_id: str) -> InProcess | ManagedOwner:
        return self._target(plugin_id)

    async def node(self, target: InProcess | ManagedOwner, node_id: str) -> ConfigurableNode:
        return await self._node(target, node_id)

    # -- inventory -------------------------------------------------------------------------

    async def inventory(self) -> list[InventoryEntry]:
        """In-process providers first, then described managed owners (``GET /v1/plugins``
        adds the managed installations that describe no nodes)."""
        plugins: list[InventoryEntry] = []
        for entry in list(self._in_process.values())[:MAX_PROVIDERS]:
            try:
                nodes = await self._run(partial(_call, entry.provider, "configuration_nodes"))
                listed = [msgspec.convert(msgspec.to_builtins(n), ConfigurableNode) for n in nodes]
                available = True
            except (ConfigurationFailure, msgspec.ValidationError):
                listed, available = [], False
            facets = _provider_facets(entry.provider)
            plugins.append(_entry(entry.plugin_id, available, listed, facets))
        return plugins

    def managed_entry(self, plugin_id: str) -> InventoryEntry | None:
        """The described owner's inventory entry (``None`` until it describes itself)."""
        owners = self.owners
        owner = None if owners is None else owners.owner(plugin_id)
        if owners is None or owner is None or not owner.described:
            return None
        available = owners.owner_available(owner)
        return _entry(owner.plugin_id, available, list(owner.nodes), owner.facets)

    # -- routing ---------------------------------------------------------------------------

    def _target(self, plugin_id: str) -> InProcess | ManagedOwner:
        found = self._in_process.get(plugin_id)
        if found is not None:
            return found
        owner = None if self.owners is None else self.owners.owner(plugin_id)
        if owner is None:
            raise ConfigurationFailure("not_found", f"no configuration provider {plugin_id}")
        return owner

    async def _node(self, target: InProcess | ManagedOwner, node_id: str) -> ConfigurableNode:
        if isinstance(target, InProcess):
            nodes = await self._run(lambda: _call(target.provider, "configuration_nodes"))
            listed = [msgspec.convert(msgspec.to_builtins(n), ConfigurableNode) for n in nodes]
        else:
            if not target.described:
                raise ConfigurationFailure("unavailable", "the plugin owner has not answered yet")
            listed = list(target.nodes)
        for node in listed:
            if node.node_id == node_id:
                return node
        raise ConfigurationFailure("not_found", f"no installed node {node_id}")

    async def _ask(
        self, target: InProcess | ManagedOwner, op: str, node_id: str, mutation: Any = None
    ) -> Any:
        if isinstance(target, InProcess):
            method = {
                "configuration": "node_configuration",
                "configure": "configure_node",
                "credentials": "node_credentials",
                "configure_credential": "configure_node_credential",
            }[op]
            handler = getattr(target.provider, method, None)
            if not callable(handler):
                raise ConfigurationFailure("not_found", "this plugin has no such facet")
            args = (node_id,) if mutation is None else (node_id, mutation)
            result = await self._run(lambda: _awaitable(handler(*args)))
            return msgspec.to_builtins(result)
        owners = self.owners
        assert owners is not None
        message: dict[str, Any] = {"op": op, "node_id": node_id}
        if mutation is not None:
            message["mutation"] = msgspec.to_builtins(mutation)
        return await self._run(
            lambda: owners.ask(target.plugin_id, message, wire.MANAGEMENT_TIMEOUT_SECONDS)
        )

    # -- configuration ---------------------------------------------------------------------

    async def configuration(self, plugin_id: str, node_id: str) -> NodeConfiguration:
        target = self._target(plugin_id)
        node = await self._node(target, node_id)
        if not node.configurable:
            raise ConfigurationFailure("not_found", f"node {node_id} has no ordinary settings")
        raw = await self._ask(target, "configuration", node_id)
        found = _checked(raw, NodeConfiguration, node_id)
        if declares_secret(found.configuration_schema):
            raise ConfigurationFailure(
                "refused",
                "the provider's schema declares write-only or password fields; credentials "
                "use the credential routes",
            )
        _bounded(found, MAX_CONFIGURATION_BYTES)
        return found

    async def configure(
        self, plugin_id: str, node_id: str, mutation: NodeConfigurationMutation
    ) -> NodeConfigurationResult:
        current = await self.configuration(plugin_id, node_id)
        if mutation.expected_revision != current.revision:
            raise ConfigurationFailure(
                "refused",
                f"the configuration is at revision {current.revision}, not "
                f"{mutation.expected_revision}; reload it before retrying",
            )
        if mutation.expected_schema_digest != current.schema_digest:
            raise ConfigurationFailure(
                "refused", "the configuration schema changed; reload it before retrying"
            )
        target = self._target(plugin_id)
        raw = await self._ask(target, "configure", node_id, mutation)
        result = msgspec.convert(raw, NodeConfigurationResult) if isinstance(raw, dict) else None
        if result is None or result.configuration.node_id != node_id:
            raise ConfigurationFailure("unavailable", "the provider answered for another node")
        _bounded(result, MAX_CONFIGURATION_BYTES)
        return result

    # -- credentials -----------------------------------------------------------------------

    async def _credential_target(self, plugin_id: str, node_id: str) -> InProcess | ManagedOwner:
        target = self._target(plugin_id)
        node = await self._node(target, node_id)
        supported = (
            callable(getattr(target.provider, "node_credentials", None))
            if isinstance(target, InProcess)
            else target.credentials
        )
        if not supported or not node.credentials_configurable:
            raise ConfigurationFailure("not_found", f"node {node_id} has no credential inputs")
        return target

    async def credentials(self, plugin_id: str, node_id: str) -> NodeCredentials:
        target = await self._credential_target(plugin_id, node_id)
        found = _checked(await self._ask(target, "credentials", node_id), NodeCredentials, node_id)
        _bounded(found, MAX_CREDENTIAL_METADATA_BYTES)
        return found

    async def configure_credential(
        self, plugin_id: str, node_id: str, mutation: NodeCredentialMutation
    ) -> NodeCredentials:
        target = await self._credential_target(plugin_id, node_id)
        try:
            raw = await self._ask(target, "configure_credential", node_id, mutation)
        except ConfigurationFailure as failure:
            if mutation.value and mutation.value in failure.message:
                # NOTE: a provider's refusal that repeats the value is not passed on.
                raise ConfigurationFailure(failure.kind, "the provider refused it") from None
            raise
        found = _checked(raw, NodeCredentials, node_id)
        if mutation.value and mutation.value in msgspec.json.encode(found).decode():
            raise ConfigurationFailure("unavailable", "the provider's answer is invalid")
        _bounded(found, MAX_CREDENTIAL_METADATA_BYTES)
        return found

    # -- read-only setup facets --------------------------------------------------------------

    async def _facet_target(
        self, plugin_id: str, node_id: str, facet: str
    ) -> InProcess | ManagedOwner:
        target = self._target(plugin_id)
        node = await self._node(target, node_id)
        method = "node_preflight" if facet == "preflight" else "node_setup"
        supported = (
            callable(getattr(target.provider, method, None))
            if isinstance(target, InProcess)
            else facet in target.facets
        )
        if not supported or (facet == "setup" and not node.setup_available):
            raise ConfigurationFailure("not_found", f"node {node_id} offers no {facet}")
        return target

    async def _read_facet(self, plugin_id: str, node_id: str, facet: str) -> Any:
        target = await self._facet_target(plugin_id, node_id, facet)
        if isinstance(target, InProcess):
            method = "node_preflight" if facet == "preflight" else "node_setup"
            handler = getattr(target.provider, method)
            return msgspec.to_builtins(await self._run(lambda: _awaitable(handler(node_id))))
        owners = self.owners
        assert owners is not None
        message: dict[str, object] = {"op": facet, "node_id": node_id}
        return await self._run(
            lambda: owners.ask(target.plugin_id, message, wire.MANAGEMENT_TIMEOUT_SECONDS)
        )

    async def preflight(self, plugin_id: str, node_id: str) -> NodePreflight:
        """The node's bounded, nonbillable checks (``GET .../preflight``)."""
        raw = await self._read_facet(plugin_id, node_id, "preflight")
        found = _observation(raw, NodePreflight, node_id)
        _bounded(found, MAX_SETUP_RESPONSE_BYTES)
        return found

    async def setup(self, plugin_id: str, node_id: str) -> NodeSetup:
        """The node's public setup files (``GET .../setup``)."""
        raw = await self._read_facet(plugin_id, node_id, "setup")
        found = _observation(raw, NodeSetup, node_id)
        _bounded(found, MAX_SETUP_RESPONSE_BYTES)
        return found

    # -- proposal review (read-only) -------------------------------------------------------

    async def _proposal_target(self, plugin_id: str, node_id: str) -> InProcess | ManagedOwner:
        target = self._target(plugin_id)
        node = await self._node(target, node_id)
        supported = (
            callable(getattr(target.provider, "node_proposals", None))
            and callable(getattr(target.provider, "node_proposal", None))
            if isinstance(target, InProcess)
            else "proposals" in target.facets
        )
        if not supported or not node.proposals_available:
            raise ConfigurationFailure("not_found", f"node {node_id} offers no proposal review")
        return target

    async def proposals(self, plugin_id: str, node_id: str, offset: int) -> ProposalPage:
        """One page of the node's retained proposals (advisory; review each afresh)."""
        target = await self._proposal_target(plugin_id, node_id)
        if isinstance(target, InProcess):
            provider: Any = target.provider
            raw = msgspec.to_builtins(
                await self._run(lambda: provider.node_proposals(node_id, offset))
            )
        else:
            owners = self.owners
            assert owners is not None
            message: dict[str, object] = {
                "op": "proposal-list",
                "plugin_id": plugin_id,
                "node_id": node_id,
                "offset": offset,
            }
            raw = await self._run(
                lambda: owners.ask(target.plugin_id, message, wire.MANAGEMENT_TIMEOUT_SECONDS)
            )
        page = _valid(raw, ProposalPage)
        for summary in page.proposals:
            if (summary.reference.plugin_id, summary.reference.node_id) != (plugin_id, node_id):
                raise ConfigurationFailure("refused", "the provider listed another node's proposal")
        _bounded(page, MAX_PROPOSAL_RESPONSE_BYTES)
        return page

    async def proposal(self, reference: ProposalReference) -> ProposalReview:
        """A fresh review of exactly ``reference`` (both id and digest must match)."""
        target = await self._proposal_target(reference.plugin_id, reference.node_id)
        if isinstance(target, InProcess):
            reviewer: Any = target.provider
            raw = msgspec.to_builtins(await self._run(lambda: reviewer.node_proposal(reference)))
        else:
            owners = self.owners
            assert owners is not None
            message = {
                "op": "proposal-review",
                "plugin_id": reference.plugin_id,
                "node_id": reference.node_id,
                "reference": msgspec.to_builtins(reference),
            }
            raw = await self._run(
                lambda: owners.ask(target.plugin_id, message, wire.MANAGEMENT_TIMEOUT_SECONDS)
            )
        review = _valid(raw, ProposalReview)
        if review.proposal.reference != reference:
            raise ConfigurationFailure("refused", "the proposal changed; list and review it again")
        _bounded(review, MAX_PROPOSAL_RESPONSE_BYTES)
        return review


def _valid(raw: object, kind: type[Reviewed]) -> Reviewed:
    try:
        return msgspec.convert(msgspec.to_builtins(raw), kind)
    except (msgspec.ValidationError, TypeError):
        raise ConfigurationFailure("refused", "the provider's answer is invalid") from None


def _observation(raw: object, kind: type[Observed], node_id: str) -> Observed:
    """A facet answer checked as the spec types it; invalid answers are refused (409)."""
    try:
        found = msgspec.convert(msgspec.to_builtins(raw), kind)
    except (msgspec.ValidationError, TypeError):
        raise ConfigurationFailure("refused", "the provider's answer is invalid") from None
    if found.node_id != node_id:
        raise ConfigurationFailure("refused", "the provider answered for another node")
    return found


def _entry(
    plugin_id: str, available: bool, nodes: list[ConfigurableNode], facets: frozenset[str]
) -> InventoryEntry:
    """One inventory entry of a provider that describes its nodes."""
    return InventoryEntry(
        plugin_id=plugin_id,
        available=available,
        nodes=[described_node(n, facets) for n in nodes[:MAX_NODES_PER_PROVIDER]],
    )


def _provider_facets(provider: object) -> frozenset[str]:
    """The optional facets an in-process provider implements."""
    methods = {
        "preflight": ("node_preflight",),
        "setup": ("node_setup",),
        "proposals": ("node_proposals", "node_proposal"),
        "proposal_actions": (
            "approve_node_proposal",
            "node_proposal_operation",
            "resume_node_proposal",
        ),
        "setup_actions": (
            "node_setup_actions",
            "start_node_setup",
            "node_setup_operation",
            "resume_node_setup",
        ),
    }
    return frozenset(
        facet
        for facet, names in methods.items()
        if all(callable(getattr(provider, name, None)) for name in names)
    )


def _checked(raw: object, kind: type[T], node_id: str) -> T:
    try:
        found = msgspec.convert(msgspec.to_builtins(raw), kind)
    except (msgspec.ValidationError, TypeError):
        raise ConfigurationFailure("unavailable", "the provider's answer is malformed") from None
    if found.node_id != node_id:
        raise ConfigurationFailure("unavailable", "the provider answered for another node")
    return found


def _from_owner(refused: wire.OwnerError) -> ConfigurationFailure:
    match refused.code:
        case "unknown_node" | "unsupported":
            return ConfigurationFailure("not_found", "no such installed node or facet")
        case "refused":
            return ConfigurationFailure("refused", refused.message)
        case "malformed" | "too_large":
            return ConfigurationFailure("malformed", refused.message)
        case "busy":
            return ConfigurationFailure("busy", "the plugin owner is busy; retry shortly")
        case "timeout":
            return ConfigurationFailure("timeout", "the plugin owner did not answer in time")
        case _:
            return ConfigurationFailure("unavailable", "the plugin owner failed")


async def _awaitable(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _call(provider: object, name: str) -> Awaitable[Any]:
    return _awaitable(getattr(provider, name)())
