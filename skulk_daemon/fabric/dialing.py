"""Whom the fabric dials: explicit peers, the peers members name in their beats, and
addresses mDNS announces, which are bounded and hung up on unless they answer as a
member within the grace (anyone on the LAN can announce)."""

from __future__ import annotations

from collections.abc import Callable

from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.peers import PeerBook, PendingDials
from skulk_daemon.fabric.transport import FabricTransport


class Dialer:
    def __init__(
        self,
        peers: PeerBook,
        transport: FabricTransport,
        *,
        explicit: frozenset[str],
        counters: LinkCounters,
        clock: Callable[[], float],
        discovered: Callable[[], None],
    ) -> None:
        """``discovered`` is called before a discovered address is dialed."""
        self._peers = peers
        self._transport = transport
        self._explicit = explicit
        self._counters = counters
        self._clock = clock
        self._discovered = discovered
        self._pending = PendingDials()

    def dial(self, address: str) -> None:
        """Connect to ``address`` (explicit, or learned from a member's beat)."""
        if self._peers.want(address):
            self._transport.connect(address)

    def dial_discovered(self, address: str) -> None:
        """Connect to an address mDNS announced, within the bound on pending dials."""
        if not self._is_member(address) and not self._pending.admit(address, self._clock()):
            self._counters.dropped["discovery_limit"] += 1
            return
        self._discovered()
        self.dial(address)

    def departed(self, address: str) -> None:
        """mDNS says the service at ``address`` left: hang up unless a member is there."""
        if self._is_member(address) or address in self._explicit:
            return
        self._pending.answered(address)
        self._peers.dial.discard(address)
        self._transport.disconnect(address)

    def answered(self, address: str) -> None:
        """A member beat from ``address``: it is no longer pending."""
        self._pending.answered(address)

    def hang_up_unanswered(self, now: float) -> None:
        for address in self._pending.expired(now):
            if not self._is_member(address) and address not in self._explicit:
                self._peers.dial.discard(address)
                self._transport.disconnect(address)

    def _is_member(self, address: str) -> bool:
        return any(peer.address == address for peer in self._peers.by_node.values())
