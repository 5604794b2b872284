"""The operator pairing service: every transition of the spec's pairing flow.

One instance per process (the daemon, or the CLI host tool); both may run at once.
Every mutating call is one locked transaction on the encrypted store, so a transition
that finds its precondition changed raises :class:`Conflict` and never loses a write,
and a refusal writes nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.operator import bounds
from skulk_core.operator.encoding import iso8601_utc
from skulk_core.operator.relay import RelayProvisioning
from skulk_daemon.operator import credentials, packaging, pairing, plugin_grants
from skulk_daemon.operator.errors import Conflict, Invalid, NotGateway
from skulk_daemon.operator.plugin_grants import PluginGrant
from skulk_daemon.operator.results import (
    ChallengeResult,
    DeviceGrant,
    DeviceStatus,
    ExchangeResult,
    GatewayIdentity,
    InvitationStatus,
    PairingIssue,
    TokenGrant,
)
from skulk_daemon.operator.state import AuthorityState, RelayRecord
from skulk_daemon.operator.store import AuthorityStore, Transaction
from skulk_daemon.operator.tls import (
    generate_tls_identity,
    materialize,
)

Clock = Callable[[], float]
log = logging.getLogger(__name__)

DEFAULT_CLUSTER_NAME: Final = "Skulk"
AUTHORITY_DIR: Final = "operator"

__all__ = [
    "ChallengeResult",
    "Clock",
    "DeviceGrant",
    "DeviceStatus",
    "ExchangeResult",
    "GatewayIdentity",
    "InvitationStatus",
    "OperatorPairingService",
    "PairingIssue",
    "TokenGrant",
]


class OperatorPairingService:
    """The gateway's pairing authority over ``<data_dir>/operator``."""

    def __init__(self, data_dir: Path, *, clock: Clock = time.time) -> None:
        self.directory = data_dir / AUTHORITY_DIR
        self._store = AuthorityStore(self.directory)
        self._clock = clock

    @classmethod
    def open(cls, data_dir: Path, *, clock: Clock = time.time) -> OperatorPairingService:
        """Open (never create) the authority; a damaged store raises :class:`StoreCorrupt`."""
        service = cls(data_dir, clock=clock)
        service._store.snapshot()
        return service

    def is_gateway(self) -> bool:
        """Whether the store was initialized (by ``pair`` or ``configure-relay``).

        A damaged store raises :class:`StoreCorrupt` rather than answering ``False``:
        it must never look like a fresh node that a later ``pair`` would re-initialize.
        """
        return self._store.snapshot() is not None

    def relay_configured(self) -> bool:
        state = self._store.snapshot()
        return state is not None and state.relay is not None

    # host-local ----------------------------------------------------------------------

    def initialize(self, cluster_name: str | None = None) -> GatewayIdentity:
        """Create the store, cluster id and pinned TLS identity if absent; idempotent.

        Given a ``cluster_name`` that differs from the stored one, renames the cluster.
        """
        name = _cluster_name(cluster_name) if cluster_name is not None else None
        with self._store.transaction() as txn:
            before = txn.state
            renamed = before is not None and name is not None and name != before.cluster_name
            state = self._prepare(txn, name, initialize=True)
            txn.write = before is None or renamed
        return self._identity(state)

    def gateway_identity(self) -> GatewayIdentity:
        """The cluster identity and pinned TLS files (written owner-only when missing)."""
        return self._identity(self._require())

    def create_session(
        self,
        exchange_url: str | None = None,
        *,
        cluster_name: str | None = None,
        initialize: bool = False,
        listener_port: int | None = None,
    ) -> PairingIssue:
        """A legacy five-minute, single-use session: v1 package, or v2 with relay access.

        With ``initialize``, an uninitialized store is initialized (and with
        ``cluster_name`` the cluster named) in the same transaction, so a package over
        the QR budget raises :class:`Invalid` with nothing at all persisted.
        ``listener_port`` is the operator port the package names when there is no
        ``exchange_url`` (see :func:`packaging.build_package`).
        """
        url = _exchange_url(exchange_url)
        name = _cluster_name(cluster_name) if cluster_name is not None else None
        with self._store.transaction() as txn:
            state = self._prepare(txn, name, initialize=initialize)
            now = self._clock()
            nonce = credentials.new_secret()
            session = pairing.add_session(state, nonce, now)
            package = packaging.build_package(
                state,
                nonce=nonce,
                expires_at=session.expires_at,
                exchange_url=url,
                listener_port=listener_port,
            )
            uri = packaging.encode(package)
            pairing.prune(state, now)
        log.info("created a five-minute operator pairing session")
        return PairingIssue(
            kind="session", uri=uri, expires_at=iso8601_utc(session.expires_at), invitation=None
        )

    def create_invitation(
        self,
        valid_for_s: int,
        max_pairings: int,
        exchange_url: str | None = None,
        *,
        cluster_name: str | None = None,
        initialize: bool = False,
        listener_port: int | None = None,
    ) -> PairingIssue:
        """A reusable, revocable version-three invitation (as :meth:`create_session`)."""
        try:
            bounds.check_invitation_lifetime(valid_for_s)
            bounds.check_max_pairings(max_pairings)
        except ValueError as exc:
            raise Invalid(str(exc)) from None
        url = _exchange_url(exchange_url)
        name = _cluster_name(cluster_name) if cluster_name is not None else None
        with self._store.transaction() as txn:
            state = self._prepare(txn, name, initialize=initialize)
            now = self._clock()
            nonce = credentials.new_secret()
            invitation = pairing.add_invitation(state, nonce, now, valid_for_s, max_pairings)
            package = packaging.build_package(
                state,
                nonce=nonce,
                expires_at=invitation.expires_at,
                exchange_url=url,
                invitation=(invitation.invitation_id, int(now), max_pairings),
                listener_port=listener_port,
            )
            uri = packaging.encode(package)
            status = pairing.invitation_status(invitation, now)
            pairing.prune(state, now)
        log.info("created operator pairing invitation %s", invitation.invitation_id)
        return PairingIssue(
            kind="invitation", uri=uri, expires_at=status.expires_at, invitation=status
        )

    def list_invitations(self) -> list[InvitationStatus]:
        """Safe status of every retained invitation, oldest first (never a nonce)."""
        state = self._require()
        now = self._clock()
        ordered = sorted(state.invitations.values(), key=lambda i: i.created_at)
        return [pairing.invitation_status(i, now) for i in ordered]

    def revoke_invitation(self, invitation_id: str) -> None:
        """Block new and unfinished attempts; paired devices stay paired. Idempotent."""
        with self._store.transaction() as txn:
            invitation = pairing.find_invitation(_required(txn.state), invitation_id)
            if invitation.revoked_at is None:
                invitation.revoked_at = self._clock()
                log.info("revoked operator pairing invitation %s", invitation_id)
            else:
                txn.write = False

    def configure_relay(
        self,
        provisioning: RelayProvisioning,
        operator_api_port: int,
        cluster_name: str,
        replace: bool = False,
    ) -> None:
        """Store validated relay provisioning; refuse to replace a different one silently."""
        if not 0 < operator_api_port < 65536:
            raise Invalid("the operator API port must be between 1 and 65535")
        name = _cluster_name(cluster_name)
        blob = msgspec.json.encode(provisioning)
        self.initialize(name)
        with self._store.transaction() as txn:
            state = _required(txn.state)
            current = state.relay
            if current is not None and current.provisioning_json != blob and not replace:
                raise Conflict(
                    "relay access is already configured with different provisioning; "
                    "pass --replace to replace it"
                )
            state.relay = RelayRecord(
                provisioning_json=blob,
                version=provisioning.version,
                configured_at=self._clock(),
            )
            state.operator_api_port = operator_api_port
        log.info("configured relay access (provisioning version %d)", provisioning.version)

    # HTTP ----------------------------------------------------------------------------

    def challenge(
        self,
        nonce: str,
        device_name: str,
        device_public_key: str,
        invitation_id: str | None = None,
    ) -> ChallengeResult:
        """Bind a device key to a session, or open a new attempt on an invitation."""
        with self._store.transaction() as txn:
            state = _gateway(txn.state)
            now = self._clock()
            if invitation_id is None:
                return pairing.challenge_session(state, nonce, device_name, device_public_key, now)
            return pairing.challenge_invitation(
                state,
                invitation_id=invitation_id,
                nonce=nonce,
                device_name=device_name,
                device_public_key=device_public_key,
                now=now,
            )

    def exchange(
        self,
        nonce: str,
        signature: str,
        invitation_id: str | None = None,
        attempt_id: str | None = None,
    ) -> ExchangeResult:
        """Verify the device's proof, consume the session or attempt, issue credentials."""
        if (invitation_id is None) != (attempt_id is None):
            raise Invalid("invitationId and attemptId must be sent together or not at all")
        with self._store.transaction() as txn:
            state = _gateway(txn.state)
            now = self._clock()
            if invitation_id is None or attempt_id is None:
                proven = pairing.exchange_session(state, nonce, signature, now)
            else:
                proven = pairing.exchange_invitation(
                    state,
                    invitation_id=invitation_id,
                    attempt_id=attempt_id,
                    nonce=nonce,
                    signature=signature,
                    now=now,
                )
            device, grant = credentials.pair_device(
                state,
                device_name=proven.device_name,
                public_key=proven.public_key,
                now=now,
                invitation_id=proven.invitation_id,
            )
            remote = packaging.remote_access(state)
            cluster_id = state.cluster_id
        log.info("paired operator device %s", device.device_id)
        return ExchangeResult(
            device_id=device.device_id,
            cluster_id=cluster_id,
            access_token=grant.access_token,
            access_token_expires_at=grant.access_token_expires_at,
            refresh_token=grant.refresh_token,
            refresh_token_expires_at=grant.refresh_token_expires_at,
            scopes=grant.scopes,
            remote_access=remote,
        )

    def refresh(self, device_id: str, refresh_token: str) -> TokenGrant:
        """Rotate the device's pair: both old tokens die; a replayed one is a 401."""
        with self._store.transaction() as txn:
            grant = credentials.rotate(_gateway(txn.state), device_id, refresh_token, self._clock())
        log.info("rotated credentials of operator device %s", device_id)
        return grant

    def authenticate(self, access_token: str) -> DeviceGrant:
        """The device a bearer access token belongs to, or :class:`Unauthorized`."""
        return credentials.authenticate(
            _gateway(self._store.snapshot()), access_token, self._clock()
        )

    def list_devices(self, caller_device_id: str | None = None) -> list[DeviceStatus]:
        state = _gateway(self._store.snapshot())
        now = self._clock()
        ordered = sorted(state.devices.values(), key=lambda d: d.paired_at)
        return [credentials.device_status(d, caller_device_id, now) for d in ordered]

    def plugin_grants(self) -> list[PluginGrant]:
        """Each paired device's explicit plugin scopes and their revision."""
        state = _gateway(self._store.snapshot())
        return plugin_grants.list_grants(state, self._clock())

    def set_plugin_grants(
        self, device_id: str, expected_revision: int, scopes: list[str]
    ) -> PluginGrant:
        """Replace one device's plugin scopes under its grant revision (others kept)."""
        with self._store.transaction() as txn:
            grant = plugin_grants.replace(
                _gateway(txn.state), device_id, expected_revision, scopes, self._clock()
            )
        log.info("replaced the plugin grants of operator device %s", device_id)
        return grant

    def revoke_device(self, device_id: str) -> None:
        """Make both of the device's credentials unusable now; idempotent; unknown: 404."""
        with self._store.transaction() as txn:
            changed = credentials.revoke(_gateway(txn.state), device_id, self._clock())
            txn.write = changed
        if changed:
            log.info("revoked operator device %s", device_id)

    # internals -----------------------------------------------------------------------

    def _prepare(self, txn: Transaction, name: str | None, *, initialize: bool) -> AuthorityState:
        """The transaction's state: created when allowed and absent, renamed when asked."""
        if txn.state is None:
            if not initialize:
                return _required(None)
            now = self._clock()
            cluster_id = str(uuid.uuid4())
            txn.state = AuthorityState(
                cluster_id=cluster_id,
                cluster_name=name or DEFAULT_CLUSTER_NAME,
                created_at=now,
                tls=generate_tls_identity(cluster_id, now=now),
            )
            log.info("initialized the operator gateway authority (cluster %s)", cluster_id)
        elif name is not None:
            txn.state.cluster_name = name
        return txn.state

    def _require(self) -> AuthorityState:
        return _required(self._store.snapshot())

    def _identity(self, state: AuthorityState) -> GatewayIdentity:
        cert_path, key_path = materialize(self.directory, state.tls)
        return GatewayIdentity(
            cluster_id=state.cluster_id,
            cluster_name=state.cluster_name,
            fingerprint=state.tls.fingerprint,
            cert_pem=state.tls.cert_pem,
            cert_path=cert_path,
            key_path=key_path,
            operator_api_port=state.operator_api_port,
            relay_configured=state.relay is not None,
        )


def _exchange_url(exchange_url: str | None) -> str | None:
    """A validated exchange URL, or ``None`` for the listener's loopback default."""
    if exchange_url is None:
        return None
    try:
        return bounds.validate_exchange_url(exchange_url)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def _cluster_name(raw: str) -> str:
    try:
        return bounds.normalize_cluster_name(raw)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def _required(state: AuthorityState | None) -> AuthorityState:
    """Host-local operations before initialization: the caller must initialize first."""
    if state is None:
        raise Conflict("this host has not been initialized as the operator gateway")
    return state


def _gateway(state: AuthorityState | None) -> AuthorityState:
    if state is None:
        raise NotGateway("this node has not been initialized as the operator gateway")
    return state
