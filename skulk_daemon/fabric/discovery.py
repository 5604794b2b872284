"""mDNS discovery of Skulk peers on the LAN (``_skulk._tcp.local.``).

Each node registers one service whose TXT record carries its node id, fabric port
and version, and browses for everybody else's. What a peer announces is untrusted
input: :func:`parse_announcement` (pure) validates it, and the rejected ones are
counted and logged, never reported. Liveness is not judged here: the fabric's
heartbeat owns that, so a service that leaves the LAN is only logged.

mDNS is a convenience. Where multicast cannot be used (no multicast-capable
interface, a chosen address that is not on this machine, the mDNS port taken
exclusively), :attr:`MdnsDiscovery.available` is False with the reason logged and
:meth:`MdnsDiscovery.start` returns normally: explicit peers still work.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import ipaddress
import logging
import re
import socket
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import psutil
from zeroconf import (
    Error as ZeroconfError,
)
from zeroconf import (
    InterfaceChoice,
    IPVersion,
    ServiceStateChange,
    Zeroconf,
)
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

log = logging.getLogger(__name__)

SERVICE_TYPE: Final = "_skulk._tcp.local."

# Bounds on what a peer may announce. Node ids are ~52 characters today
# (base58 of an Ed25519 identity multihash); the slack is for future key types.
NODE_ID_MAX_LENGTH: Final = 128
VERSION_MAX_LENGTH: Final = 64
# More addresses than this are dropped (IPv4 kept first): a node has a few NICs.
ADDRESSES_MAX: Final = 16
PORT_MIN: Final = 1
PORT_MAX: Final = 65535
# How long one resolution of a peer's SRV/TXT/address records may take.
RESOLVE_TIMEOUT_MS: Final = 3000
# Rejection reasons kept for diagnostics (oldest dropped): a LAN can announce
# any number of names, and the count keeps growing regardless.
REJECTIONS_MAX: Final = 256
MAX_DISCOVERED_PEERS: Final = 256
"""Services tracked at once; announcements beyond are ignored (and counted)."""
MAX_RESOLVING: Final = 16
"""Announcements resolved at once; the next ones wait their turn."""
MAX_WAITING: Final = MAX_DISCOVERED_PEERS
"""Announcements waiting to be resolved, at most; a flood beyond is ignored (and counted).

NOTE: a burst (a LAN's nodes starting together, or an event loop that reads many
datagrams a wake-up, as uvloop does) announces more services at once than are
resolved at once; dropping those would lose a real peer for good, as the browser
reports a service once."""
# Characters kept from the end of the node id in our instance and host names.
INSTANCE_SUFFIX_LENGTH: Final = 12

TXT_NODE_ID: Final = "node_id"
TXT_PORT: Final = "port"
TXT_VERSION: Final = "version"

# Printable ASCII without spaces: ids and versions are tokens, never prose.
_TOKEN: Final = re.compile(r"[!-~]+")


@dataclass(frozen=True, slots=True)
class DiscoveredPeer:
    """A Skulk node seen on the LAN, as it announced itself."""

    node_id: str
    addresses: tuple[str, ...]  # IPv4 first, then IPv6
    port: int  # its fabric port
    version: str  # "" when the peer announced none


PeerHandler = Callable[[DiscoveredPeer], None]


def _token(raw: bytes | None, field: str, max_length: int) -> str:
    """Decode one TXT value that must be a short printable-ASCII token."""
    if raw is None:
        raise ValueError(f"TXT {field} has no value")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"TXT {field} is not ASCII") from None
    if len(text) > max_length:
        raise ValueError(f"TXT {field} is {len(text)} characters, over {max_length}")
    if not _TOKEN.fullmatch(text):
        raise ValueError(f"TXT {field} {text!r} is empty or not printable")
    return text


def _port(raw: bytes | None) -> int:
    text = _token(raw, TXT_PORT, len(str(PORT_MAX)))
    if not text.isdigit():
        raise ValueError(f"TXT {TXT_PORT} {text!r} is not a number")
    port = int(text)
    if not PORT_MIN <= port <= PORT_MAX:
        raise ValueError(f"TXT {TXT_PORT} {port} is outside {PORT_MIN}..{PORT_MAX}")
    return port


def _usable_addresses(addresses: Sequence[str]) -> tuple[str, ...]:
    """Unique unicast addresses, IPv4 first, at most ``ADDRESSES_MAX``."""
    v4: list[str] = []
    v6: list[str] = []
    for text in addresses:
        try:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            continue
        if ip.is_unspecified or ip.is_multicast:
            continue
        bucket = v4 if ip.version == 4 else v6
        if text not in bucket:
            bucket.append(text)
    return tuple([*v4, *v6][:ADDRESSES_MAX])


def parse_announcement(
    properties: Mapping[bytes, bytes | None], addresses: Sequence[str]
) -> DiscoveredPeer:
    """Validate one resolved ``_skulk._tcp`` service; ``ValueError`` says what is wrong.

    The TXT ``port`` is the fabric port. The SRV port is not consulted: while a
    restarted peer's records replace the old ones, the cache can briefly hold one
    of each, and the TXT record is the one Skulk defines.
    """
    if TXT_NODE_ID.encode() not in properties:
        raise ValueError(f"TXT {TXT_NODE_ID} is missing")
    node_id = _token(properties[TXT_NODE_ID.encode()], TXT_NODE_ID, NODE_ID_MAX_LENGTH)
    if TXT_PORT.encode() not in properties:
        raise ValueError(f"TXT {TXT_PORT} is missing")
    port = _port(properties[TXT_PORT.encode()])
    version = ""
    if TXT_VERSION.encode() in properties:
        version = _token(properties[TXT_VERSION.encode()], TXT_VERSION, VERSION_MAX_LENGTH)
    usable = _usable_addresses(addresses)
    if not usable:
        raise ValueError("no usable address announced")
    return DiscoveredPeer(node_id=node_id, addresses=usable, port=port, version=version)


def instance_label(node_id: str) -> str:
    """``skulk-<last 12 characters of the node id>``, reduced to a valid DNS label."""
    tail = re.sub(r"[^A-Za-z0-9]", "", node_id)[-INSTANCE_SUFFIX_LENGTH:]
    if not tail:
        tail = hashlib.sha256(node_id.encode()).hexdigest()[:INSTANCE_SUFFIX_LENGTH]
    return f"skulk-{tail}"


def _resolve_ip_version(
    interfaces: InterfaceChoice | list[str], ip_version: IPVersion | None
) -> IPVersion:
    if ip_version is not None:
        return ip_version
    if isinstance(interfaces, InterfaceChoice):
        return IPVersion.V4Only  # zeroconf's own default for an interface choice
    versions = {ipaddress.ip_address(address).version for address in interfaces}
    if versions == {6}:
        return IPVersion.V6Only
    return IPVersion.All if versions == {4, 6} else IPVersion.V4Only


def _local_addresses() -> dict[str, bool]:
    """Every address assigned on this machine, mapped to whether its interface is up."""
    stats = psutil.net_if_stats()
    found: dict[str, bool] = {}
    for name, addresses in psutil.net_if_addrs().items():
        up = name in stats and stats[name].isup
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                found[address.address.split("%", 1)[0]] = up
    return found


def _announce_addresses(
    interfaces: InterfaceChoice | list[str], ip_version: IPVersion
) -> list[str]:
    """The addresses we announce: the chosen ones, else every routable one that is up.

    A machine with nothing but loopback announces loopback, so nodes sharing it
    still find each other.
    """
    if isinstance(interfaces, list):
        return list(interfaces)
    routable: list[str] = []
    loopback: list[str] = []
    for address, up in _local_addresses().items():
        ip = ipaddress.ip_address(address)
        if not up or ip.is_link_local or ip.is_unspecified:
            continue
        if (ip.version == 4 and ip_version is IPVersion.V6Only) or (
            ip.version == 6 and ip_version is IPVersion.V4Only
        ):
            continue
        (loopback if ip.is_loopback else routable).append(address)
    return list(_usable_addresses(routable or loopback))


def _interfaces_problem(interfaces: InterfaceChoice | list[str]) -> str | None:
    """Why the chosen addresses cannot carry mDNS here, checked before zeroconf binds.

    zeroconf raises from its constructor with sockets it has not closed when a
    chosen address is not on an up interface; catching that here keeps the common
    misconfiguration off that path.
    """
    if not isinstance(interfaces, list):
        return None
    if not interfaces:
        return "no interface address was chosen"
    local = _local_addresses()
    for address in interfaces:
        if address not in local:
            return f"{address} is not an address of any interface on this machine"
        if not local[address]:
            return f"the interface holding {address} is down"
    return None


class MdnsDiscovery:
    """Announce this node and report other Skulk nodes on the LAN.

    ``on_peer`` runs on the event loop for every new or changed peer (a peer
    that restarted on another port is reported again); never for ourselves or
    for a malformed announcement. ``interfaces`` restricts mDNS to those local
    addresses (tests use ``["127.0.0.1"]``); ``ip_version`` None lets zeroconf's
    rule pick it (IPv4 for an interface choice, else from the addresses).
    """

    SERVICE_TYPE: Final = SERVICE_TYPE

    def __init__(
        self,
        *,
        node_id: str,
        fabric_port: int,
        version: str,
        on_peer: PeerHandler,
        on_departed: PeerHandler | None = None,
        interfaces: InterfaceChoice | list[str] = InterfaceChoice.All,
        ip_version: IPVersion | None = None,
    ) -> None:
        # Our own announcement must pass the checks we apply to everyone else's.
        _token(node_id.encode(), TXT_NODE_ID, NODE_ID_MAX_LENGTH)
        _port(str(fabric_port).encode())
        if version:
            _token(version.encode(), TXT_VERSION, VERSION_MAX_LENGTH)
        if isinstance(interfaces, list):
            for address in interfaces:
                ipaddress.ip_address(address)  # ValueError names a bad entry
        resolved_version = _resolve_ip_version(interfaces, ip_version)
        if interfaces is InterfaceChoice.Default and resolved_version is not IPVersion.V4Only:
            # zeroconf would warn (DeprecationWarning) and send IPv6 nowhere useful.
            raise ValueError("InterfaceChoice.Default carries IPv4 only; choose All or addresses")
        self._node_id = node_id
        self._fabric_port = fabric_port
        self._version = version
        self._on_peer = on_peer
        self._on_departed = on_departed
        self._ignored = 0
        self._interfaces = interfaces
        self._ip_version = resolved_version
        self._label = instance_label(node_id)
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._announce: asyncio.Task[None] | None = None
        self._resolving: dict[str, asyncio.Task[None]] = {}
        self._waiting: dict[str, None] = {}
        """Names announced while ``MAX_RESOLVING`` were resolving, oldest first."""
        self._peers: dict[str, DiscoveredPeer] = {}
        self._rejections: dict[str, str] = {}
        self._impostors: set[str] = set()
        self._malformed = 0
        self._unavailable_reason: str | None = "not started"
        self._started = False

    @property
    def available(self) -> bool:
        """True once started and announcing on at least one interface."""
        return self._unavailable_reason is None

    @property
    def unavailable_reason(self) -> str | None:
        """Why mDNS is not in use (``"not started"``, ``"closed"``, or what failed)."""
        return self._unavailable_reason

    @property
    def service_name(self) -> str | None:
        """Our registered instance name (zeroconf renames it on a conflict)."""
        return self._info.name if self._info is not None else None

    @property
    def peers(self) -> dict[str, DiscoveredPeer]:
        """The last valid announcement per service name (a copy)."""
        return dict(self._peers)

    @property
    def ignored_count(self) -> int:
        """How many announcements were ignored past the bounds (a flood)."""
        return self._ignored

    @property
    def malformed_count(self) -> int:
        """How many malformed announcements were seen and ignored."""
        return self._malformed

    @property
    def rejections(self) -> dict[str, str]:
        """The latest reason each ignored service was refused, by service name (a copy)."""
        return dict(self._rejections)

    def _unavailable(self, reason: str) -> None:
        self._unavailable_reason = reason
        log.warning("mDNS discovery unavailable: %s; explicit peers still work", reason)

    async def start(self) -> None:
        """Register our service and browse for peers; degrades instead of raising."""
        if self._started:
            raise RuntimeError("MdnsDiscovery.start() called twice")
        self._started = True
        problem = _interfaces_problem(self._interfaces)
        if problem is not None:
            self._unavailable(problem)
            return
        problem = self._open()
        if problem is not None:
            self._unavailable(problem)
            return
        assert self._zc is not None
        try:
            await self._zc.zeroconf.async_wait_for_start()
            if not self._zc.zeroconf.engine.senders:
                await self._shut_zeroconf()
                self._unavailable(
                    f"no interface among {self._describe_interfaces()} could join the mDNS "
                    "multicast group"
                )
                return
            self._unavailable_reason = None
            self._info = self._service_info()
            # Browse first so discovery overlaps our name probing (about a second).
            self._browser = AsyncServiceBrowser(
                self._zc.zeroconf, SERVICE_TYPE, handlers=[self._on_service_state_change]
            )
            announced = await self._zc.async_register_service(self._info, allow_name_change=True)
            self._announce = asyncio.ensure_future(_wait(announced))
        except (OSError, ZeroconfError) as exc:
            await self.close()
            self._unavailable(f"zeroconf failed to start: {exc}")
            return
        log.info(
            "mDNS: announcing %s (fabric port %d) on %s",
            self._info.name,
            self._fabric_port,
            self._describe_interfaces(),
        )

    def _open(self) -> str | None:
        """Create the zeroconf instance; the reason it cannot be, else None."""
        # NOTE: when zeroconf's constructor raises it leaves its listen socket
        # unclosed, and the ResourceWarning fires when the traceback is freed. The
        # failure is reported as unavailability, so that warning is noise: it is
        # silenced for exactly this call (collecting the traceback inside the block).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                self._zc = AsyncZeroconf(interfaces=self._interfaces, ip_version=self._ip_version)
            except (OSError, RuntimeError) as exc:
                problem = f"cannot open mDNS sockets on {self._describe_interfaces()}: {exc}"
            else:
                return None
            gc.collect()
        return problem

    def _describe_interfaces(self) -> str:
        if isinstance(self._interfaces, list):
            return ", ".join(self._interfaces)
        return f"{self._interfaces.name.lower()} interfaces ({self._ip_version.name})"

    def _service_info(self) -> AsyncServiceInfo:
        addresses = _announce_addresses(self._interfaces, self._ip_version)
        if not addresses:
            log.warning("mDNS: no address to announce; peers will not resolve us")
        properties = {TXT_NODE_ID: self._node_id, TXT_PORT: str(self._fabric_port)}
        if self._version:
            properties[TXT_VERSION] = self._version
        return AsyncServiceInfo(
            SERVICE_TYPE,
            f"{self._label}.{SERVICE_TYPE}",
            port=self._fabric_port,
            properties=properties,
            server=f"{self._label}.local.",
            parsed_addresses=addresses,
        )

    def _on_service_state_change(
        self,
        zeroconf: Zeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        del zeroconf, service_type
        if self._info is not None and name == self._info.name:
            return
        previous = self._resolving.pop(name, None)
        if previous is not None:
            previous.cancel()  # a newer announcement supersedes it
        self._waiting.pop(name, None)
        if state_change is ServiceStateChange.Removed:
            # Liveness belongs to the fabric heartbeat; forgetting the service
            # means its return is reported as new.
            log.debug("mDNS: %s left", name)
            departed = self._peers.pop(name, None)
            if departed is not None and self._on_departed is not None:
                try:
                    self._on_departed(departed)
                except Exception:
                    log.exception("mDNS: the departure handler failed for %s", departed.node_id)
            return
        full = name not in self._peers and len(self._peers) >= MAX_DISCOVERED_PEERS
        if full or len(self._waiting) >= MAX_WAITING:
            # NOTE: bounded, so that thousands of fake services cost a counter, not
            # thousands of resolutions, sockets and file descriptors.
            self._ignored += 1
            if self._ignored == 1 or self._ignored % 1000 == 0:
                log.warning("mDNS: %d announcements ignored past the bounds", self._ignored)
            return
        if len(self._resolving) >= MAX_RESOLVING:
            self._waiting[name] = None
            return
        self._start_resolving(name)

    def _start_resolving(self, name: str) -> None:
        task = asyncio.get_running_loop().create_task(self._resolve(name))
        self._resolving[name] = task
        task.add_done_callback(lambda done: self._forget_task(name, done))

    def _forget_task(self, name: str, task: asyncio.Task[None]) -> None:
        if self._resolving.get(name) is task:
            del self._resolving[name]
        if not task.cancelled() and task.exception() is not None:
            log.error("mDNS: resolving %s failed", name, exc_info=task.exception())
        if self._zc is None or self._browser is None:
            return  # closing: the waiting names go with the browser
        while self._waiting and len(self._resolving) < MAX_RESOLVING:
            waiting = next(iter(self._waiting))
            del self._waiting[waiting]
            self._start_resolving(waiting)

    async def _resolve(self, name: str) -> None:
        assert self._zc is not None
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        if not await info.async_request(self._zc.zeroconf, RESOLVE_TIMEOUT_MS):
            log.debug("mDNS: %s did not resolve within %d ms", name, RESOLVE_TIMEOUT_MS)
            return
        addresses = [
            *info.parsed_scoped_addresses(IPVersion.V4Only),
            *info.parsed_scoped_addresses(IPVersion.V6Only),
        ]
        try:
            peer = parse_announcement(info.properties, addresses)
        except ValueError as exc:
            self._reject(name, str(exc))
            return
        self._rejections.pop(name, None)
        if peer.node_id == self._node_id:
            if name not in self._impostors:
                self._impostors.add(name)
                log.warning("mDNS: %s announces our own node id (a copied key?); ignored", name)
            return
        if self._peers.get(name) == peer:
            return
        self._peers[name] = peer
        log.info(
            "mDNS: peer %s at %s port %d (version %s)",
            peer.node_id,
            ", ".join(peer.addresses),
            peer.port,
            peer.version or "unknown",
        )
        try:
            self._on_peer(peer)
        except Exception:
            log.exception("mDNS: the peer handler failed for %s", peer.node_id)

    def _reject(self, name: str, reason: str) -> None:
        self._peers.pop(name, None)
        if self._rejections.get(name) == reason:
            return  # the same announcement again (a re-announce or cache refresh)
        self._rejections.pop(name, None)
        self._rejections[name] = reason  # newest last
        while len(self._rejections) > REJECTIONS_MAX:
            del self._rejections[next(iter(self._rejections))]
        self._malformed += 1
        log.info("mDNS: ignoring malformed announcement %s: %s", name, reason)

    async def _shut_zeroconf(self) -> None:
        zc, self._zc = self._zc, None
        if zc is not None:
            await zc.async_close()

    async def close(self) -> None:
        """Stop browsing, say goodbye and release the sockets; safe to call twice."""
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        tasks = [*self._resolving.values()]
        if self._announce is not None:
            tasks.append(self._announce)
            self._announce = None
        for task in tasks:
            task.cancel()
        # NOTE: wait for the cancelled tasks before closing zeroconf so none of
        # them touches a closed instance (and none is left pending). Their own
        # failures were logged when they ended.
        await asyncio.gather(*tasks, return_exceptions=True)
        self._resolving.clear()
        self._waiting.clear()
        await self._shut_zeroconf()
        self._unavailable_reason = "closed"


async def _wait(awaitable: Awaitable[object]) -> None:
    await awaitable
