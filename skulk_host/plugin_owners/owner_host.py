"""The owner runtime: serves a plugin written against ``skulk.extensions`` as a managed
owner, on the owner-only socket of :mod:`skulk_host.plugin_owners.wire`.

The supervisor starts it (``python -I -B -m skulk_host.plugin_owners.owner_host``)
with Skulk's own interpreter, the sealed generation's ``site-packages`` appended to
the import path (after Skulk's, so a plugin cannot shadow the public surface), the
generation's signed owner entry (``module:attr``; with ``--bundle``, the sealed bundle's
``__owner__.py`` loaded as ``__owner__``, the bundle appended to the path after
``site-packages``, and ``attr`` its ``main``) and the installation's owner
directory. ``attr`` is a provider class (or a zero-argument factory returning a
provider): an object with ``capabilities()`` + ``handle_call`` and/or the
``NodeConfigurationProvider`` / ``NodeCredentialsProvider`` facets (and the optional
preflight, setup, proposal review, proposal action and setup action facets, each
declared in ``describe`` only when every method is implemented). A factory that
returns ``None`` was a plain program: it has run, and the owner exits.

The provider runs here, in the owner's process: Skulk's API process imports no plugin
code. Unary calls run under the call's own deadline; one hanging call holds only its
own connection (health and configuration keep answering). Protocol 4 adds streaming:
server-streaming descriptors are served by ``handle_stream(context, call)``,
client-streaming and bidirectional ones by ``handle_input_stream(context, call,
frames)`` (the in-process streaming interface), with the optional ``admit_stream``
consulted at admission; unary calls and streams share one concurrency bound. Skulk
binds its transport node id once (``bind``); ``health`` and ``describe`` report it.
Credential values arrive in ``configure_credential`` and are handed to the provider;
they are never logged and never part of an answer.

A provider with ``host_callbacks_available = True`` is described with
``host_callbacks_available: true`` and also served ``host.sock`` beside the control
socket (:mod:`skulk_host.plugin_owners.host_callbacks`); its hooks' context then
carries ``context.host``, the callbacks to the bound Skulk host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib
import inspect
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Final, assert_never

import msgspec

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    descriptor_revision,
)
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary
from skulk_core.plugins.node_configuration import NodeConfigurationRefused, UnknownNode
from skulk_host.plugin_owners import wire
from skulk_host.plugin_owners.host_callbacks import OwnerHostCallbacks
from skulk_host.plugin_owners.owner_requests import (
    ApproveProposal,
    Bind,
    Call,
    Configure,
    ConfigureCredential,
    Describe,
    Health,
    ListProposals,
    ListSetupActions,
    OwnerRequest,
    Preflight,
    ProposalOperation,
    ReadConfiguration,
    ReadCredentials,
    ReadSetup,
    ResumeProposal,
    ResumeSetup,
    ReviewProposal,
    SetupOperation,
    StartSetup,
    Stream,
    UnaryRequest,
    decode,
    op_of,
)
from skulk_host.plugin_owners.owner_stream import OwnerStream
from skulk_host.plugin_release.archive import load_shim
from skulk_host.unix_address import owner_only_server

log = logging.getLogger("skulk.plugins.owner")

MAX_CONCURRENT_CALLS: Final = 8
_HANDLER_OF: Final = {
    "unary": "handle_call",
    "server_streaming": "handle_stream",
    "client_streaming": "handle_input_stream",
    "bidirectional": "handle_input_stream",
}
PARENT_POLL_SECONDS: Final = 1.0
"""How often an owner checks that its manager still runs."""
_SETUP_ACTIONS: Final = (
    "node_setup_actions",
    "start_node_setup",
    "node_setup_operation",
    "resume_node_setup",
)
_PROPOSAL_ACTIONS: Final = (
    "approve_node_proposal",
    "node_proposal_operation",
    "resume_node_proposal",
)


class OwnerContext:
    """What an owner-hosted provider's hooks receive in place of the in-process
    ``ExtensionContext``: capability-node summaries are kept here (not relayed);
    ``host`` is the provider's host callbacks (``None`` unless it opted in)."""

    def __init__(self, host: OwnerHostCallbacks | None = None) -> None:
        self.capability_nodes: dict[tuple[str, str], object] = {}
        self.host = host

    def publish_capability_node(self, summary: CapabilityNodeSummary) -> bool:
        self.capability_nodes[(summary.plugin_id, summary.node_id)] = summary
        return True

    def withdraw_capability_node(self, plugin_id: str, node_id: str) -> bool:
        return self.capability_nodes.pop((plugin_id, node_id), None) is not None


def load_provider(entry: str, site: Path | None, bundle: Path | None = None) -> object | None:
    if site is not None:
        sys.path.append(str(site))
    module_name, _, attr = entry.partition(":")
    module = importlib.import_module(module_name) if bundle is None else load_shim(bundle, "owner")
    target = getattr(module, attr)
    provider: object | None = target()
    return provider


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class OwnerHost:
    def __init__(self, provider: object, control: Path) -> None:
        self.provider = provider
        self.control = control
        self.callbacks: OwnerHostCallbacks | None = None
        if getattr(provider, "host_callbacks_available", False) is True:
            self.callbacks = OwnerHostCallbacks(lambda: self.transport_node_id)
        self.context = OwnerContext(self.callbacks)
        self._calls = 0
        self._server: asyncio.AbstractServer | None = None
        self.transport_node_id: str | None = None
        """The Skulk transport identity this owner is bound to (first ``bind`` wins)."""

    # -- what the provider offers -------------------------------------------------------

    def descriptors(self) -> list[CapabilityDescriptor]:
        listing = getattr(self.provider, "capabilities", None)
        if not callable(listing):
            return []
        found = [d for d in listing() if isinstance(d, CapabilityDescriptor)]
        # Only modes whose handler the provider implements (protocol 4 serves them all).
        return [d for d in found if callable(getattr(self.provider, _HANDLER_OF[d.io_mode], None))]

    def _ready(self, descriptor: CapabilityDescriptor) -> bool:
        check = getattr(self.provider, "capability_ready", None)
        if not callable(check):
            return True
        try:
            return check(descriptor.qualified_id) is True
        except Exception:
            return False

    async def describe(self) -> dict[str, object]:
        nodes: list[Any] = []
        listing = getattr(self.provider, "configuration_nodes", None)
        if callable(listing):
            nodes = [msgspec.to_builtins(n) for n in await _maybe_await(listing())]
        descriptors = self.descriptors()
        return {
            "protocol": wire.OWNER_PROTOCOL,
            "transport_node_id": self.transport_node_id,
            "nodes": nodes,
            "credentials": callable(getattr(self.provider, "node_credentials", None)),
            "preflight": callable(getattr(self.provider, "node_preflight", None)),
            "setup": callable(getattr(self.provider, "node_setup", None)),
            "proposals": callable(getattr(self.provider, "node_proposals", None))
            and callable(getattr(self.provider, "node_proposal", None)),
            "proposal_actions": all(
                callable(getattr(self.provider, name, None)) for name in _PROPOSAL_ACTIONS
            ),
            "setup_actions": all(
                callable(getattr(self.provider, name, None)) for name in _SETUP_ACTIONS
            ),
            "host_callbacks_available": self.callbacks is not None,
            "capabilities": [msgspec.to_builtins(d) for d in descriptors],
            "ready": [d.qualified_id for d in descriptors if self._ready(d)],
        }

    def _facet(self, name: str) -> Any:
        method = getattr(self.provider, name, None)
        if not callable(method):
            raise _Refusal("unsupported", "this owner does not offer that facet")
        return method

    async def handle(self, request: UnaryRequest) -> bytes:
        match request:
            case Health():
                described = await self.describe()
                digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
                return wire.ok(
                    {
                        "healthy": True,
                        "describe_revision": digest.hexdigest(),
                        "transport_node_id": self.transport_node_id,
                    }
                )
            case Bind(transport_node_id=identity):
                return self._bind(identity)
            case Describe():
                return wire.ok(await self.describe())
            case ReadConfiguration(node_id=node_id):
                found = await self._facet("node_configuration")(node_id)
            case Configure(node_id=node_id, mutation=mutation):
                found = await self._facet("configure_node")(node_id, mutation)
            case ReadCredentials(node_id=node_id):
                found = await self._facet("node_credentials")(node_id)
            case ConfigureCredential(node_id=node_id, mutation=credential):
                found = await self._facet("configure_node_credential")(node_id, credential)
            case Preflight(node_id=node_id):
                found = await self._facet("node_preflight")(node_id)
            case ReadSetup(node_id=node_id):
                found = await self._facet("node_setup")(node_id)
            case ListProposals(node_id=node_id, offset=offset):
                found = await self._facet("node_proposals")(node_id, offset)
            case ReviewProposal(reference=reference):
                found = await self._facet("node_proposal")(reference)
            case ApproveProposal(approval=approval, operator_id=operator_id):
                found = await self._facet("approve_node_proposal")(approval, operator_id)
            case ProposalOperation(node_id=node_id, operation_id=operation_id):
                found = await self._facet("node_proposal_operation")(node_id, operation_id)
            case ResumeProposal(node_id=node_id, operation_id=operation_id, operator_id=actor):
                found = await self._facet("resume_node_proposal")(node_id, operation_id, actor)
            case ListSetupActions(node_id=node_id):
                found = await self._facet("node_setup_actions")(node_id)
            case StartSetup(node_id=node_id, start=start):
                found = await self._facet("start_node_setup")(node_id, start)
            case SetupOperation(node_id=node_id, operation_id=operation_id):
                found = await self._facet("node_setup_operation")(node_id, operation_id)
            case ResumeSetup(node_id=node_id, operation_id=operation_id):
                found = await self._facet("resume_node_setup")(node_id, operation_id)
            case Call():
                return await self._call(request)
            case _:
                assert_never(request)
        return wire.ok(msgspec.to_builtins(found))

    def _bind(self, identity: str) -> bytes:
        """Bind the Skulk transport identity once; a different one is refused."""
        if self.transport_node_id is None:
            self.transport_node_id = identity
            log.info("owner bound to its Skulk host's transport identity")
        elif self.transport_node_id != identity:
            return wire.error("refused", "this owner is bound to another Skulk transport identity")
        return wire.ok({"transport_node_id": self.transport_node_id})

    async def _call(self, request: Call) -> bytes:
        call = request.call
        served = {d.qualified_id: d for d in self.descriptors() if d.io_mode == "unary"}
        descriptor = served.get(call.qualified_id)
        if descriptor is None or descriptor_revision(descriptor) != call.descriptor_revision:
            return wire.error("unsupported", f"this owner does not serve {call.qualified_id}")
        if self._calls >= MAX_CONCURRENT_CALLS:
            return wire.error("busy", "this owner already serves its concurrent calls")
        self._calls += 1
        try:
            async with asyncio.timeout(call.timeout_seconds):
                output = await _maybe_await(
                    self.provider.handle_call(self.context, call)  # type: ignore[attr-defined]
                )
        except TimeoutError:
            return wire.error("timeout", f"{call.qualified_id} ran past its deadline")
        finally:
            self._calls -= 1
        return wire.ok({"output": output})

    # -- the socket ---------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await self._request(reader)
            if isinstance(request, Stream):
                await self._stream(request, reader, writer)
                return
            answer = request if isinstance(request, bytes) else await self._answer(request)
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(answer)
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _request(self, reader: asyncio.StreamReader) -> OwnerRequest | bytes:
        """The request, or the refusal to answer it (an encoded error)."""
        raw = bytearray()
        while b"\n" not in raw:
            chunk = await reader.read(65536)
            if not chunk:
                break
            raw += chunk
            if len(raw) > wire.MAX_INVOCATION_BYTES:
                return wire.error("too_large", "the request is over the owner protocol's bound")
        return decode(bytes(raw))

    async def _answer(self, request: UnaryRequest) -> bytes:
        try:
            answer = await self.handle(request)
        except _Refusal as refusal:
            return wire.error(refusal.code, refusal.message)
        except UnknownNode:
            return wire.error("unknown_node", "no such installed node")
        except NodeConfigurationRefused as refusal:
            return wire.error("refused", str(refusal) or "the provider refused the change")
        except (msgspec.ValidationError, ValueError, TypeError):
            return wire.error("malformed", "the request does not match the owner protocol")
        except Exception:
            # NOTE: the exception text may carry anything the plugin had in hand
            # (a credential included): only its type is logged, nothing is answered.
            log.error("owner request %s raised %s", op_of(request), "an exception")
            return wire.error("provider_error", "the owner failed to handle the request")
        if len(answer) > wire.MAX_RESPONSE_BYTES:
            return wire.error("too_large", "the owner's answer would be over its bound")
        return answer

    # -- streaming (protocol 4) ------------------------------------------------------------

    async def _admission(self, request: Stream) -> tuple[CapabilityCall, str] | bytes:
        """The admitted call and its mode, or the refusal line."""
        call = request.call
        served = {d.qualified_id: d for d in self.descriptors() if d.io_mode != "unary"}
        descriptor = served.get(call.qualified_id)
        if descriptor is None or descriptor_revision(descriptor) != call.descriptor_revision:
            return wire.error("unsupported", f"this owner does not stream {call.qualified_id}")
        if self._calls >= MAX_CONCURRENT_CALLS:
            return wire.error("busy", "this owner already serves its concurrent calls")
        hook = getattr(self.provider, "admit_stream", None)
        if callable(hook):
            try:
                async with asyncio.timeout(call.timeout_seconds):
                    outcome = await _maybe_await(hook(self.context, call))
            except TimeoutError:
                return wire.error("timeout", "admission ran past the deadline")
            except Exception:
                log.error("admit_stream of %s raised an exception", call.qualified_id)
                return wire.error("provider_error", "the owner failed to admit the stream")
            if isinstance(outcome, CapabilityError):
                return wire.encode(
                    {
                        "ok": False,
                        "error": {
                            "code": "refused",
                            "message": outcome.message[:500],
                            "capability_error": {
                                "code": outcome.code,
                                "message": outcome.message[:500],
                            },
                        },
                    }
                )
        return call, descriptor.io_mode

    async def _stream(
        self, request: Stream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        admitted = await self._admission(request)
        if isinstance(admitted, bytes):
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(admitted)
                await writer.drain()
            return
        call, mode = admitted
        self._calls += 1
        try:
            writer.write(wire.ok({"admitted": True}))
            await writer.drain()
            await OwnerStream(
                self.provider,
                context=self.context,
                call=call,
                mode=mode,
                reader=reader,
                writer=writer,
            ).run()
        except (ConnectionError, OSError, wire.StreamBroken):
            log.info("stream %s: the host closed the connection", call.qualified_id)
        finally:
            self._calls -= 1

    async def serve(self, stop: asyncio.Event) -> None:
        directory = self.control
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if directory.is_symlink():
            raise SystemExit("the owner directory is a symbolic link")
        directory.chmod(0o700)
        path = directory / wire.SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        if self.callbacks is not None:
            await self.callbacks.serve(directory)
        start = getattr(self.provider, "on_start", None)
        if callable(start):
            await _maybe_await(start(self.context))
        self._server = await owner_only_server(self._connection, path)
        log.info("owner serving on its control socket (protocol %d)", wire.OWNER_PROTOCOL)
        try:
            await stop.wait()
        finally:
            self._server.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            if self.callbacks is not None:
                await self.callbacks.close(directory)
            stop_hook = getattr(self.provider, "on_stop", None)
            if callable(stop_hook):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(_maybe_await(stop_hook()), 5.0)


class _Refusal(Exception):
    def __init__(self, code: wire.ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: wire.ErrorCode = code
        self.message = message


async def _watch_parent(stop: asyncio.Event) -> None:
    """Stop when the manager that started this owner is gone (killed, not asked):
    its successor starts the owner again, and two owners must never share one
    installation's socket."""
    parent = os.getppid()
    while not stop.is_set():
        await asyncio.sleep(PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            log.warning("the plugin manager is gone; stopping")
            stop.set()


async def _run(provider: object, control: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch = asyncio.create_task(_watch_parent(stop))
    try:
        await OwnerHost(provider, control).serve(stop)
    finally:
        watch.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owner_host")
    parser.add_argument("--entry", required=True)
    parser.add_argument("--control", required=True, type=Path)
    parser.add_argument("--site", type=Path, default=None)
    parser.add_argument("--bundle", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    sys.argv = [args.entry]  # the plugin sees no arguments of the runtime's own
    provider = load_provider(args.entry, args.site, args.bundle)
    if provider is None:
        return 0  # a plain program: it ran; the supervisor sees it exit
    asyncio.run(_run(provider, args.control))
    return 0


if __name__ == "__main__":
    sys.exit(main())
