"""The host tool: ``python -m skulk_daemon.operator [--data-dir D] <command> ...``.

Host-local authority operations for the CLI, which never imports the daemon and runs
this as a subprocess instead. It prints exactly one JSON object on stdout:

- ``pair [--cluster-name N] [--exchange-url U] [--valid-for 90d] [--max-pairings K]``
  -> ``{"kind": "session"|"invitation", "uri", "expiresAt", "invitation", "clusterId",
  "clusterName", "fingerprint"}`` (``--valid-for`` or ``--max-pairings`` selects a
  version-three invitation; a package over the QR budget is refused with nothing
  persisted; without ``--exchange-url`` the package names the operator port the running
  node publishes, see :mod:`skulk_daemon.operator.listener_record`);
- ``invitations list`` -> ``{"invitations": [...]}``;
- ``invitations revoke ID`` -> ``{"revoked": ID}``;
- ``configure-relay --provisioning-file F --operator-api-port P --cluster-name N
  [--replace]`` -> ``{"configured": true, "version": 1|2}``.

Exit 0 on success; 1 with ``{"error": "<safe message>"}`` on a refusal; 2 with the same
shape on a usage error. The data directory is the daemon's (``--data-dir``, then
``SKULK_DATA_DIR``, then the XDG default).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import NoReturn

import msgspec

from skulk_core.operator.bounds import INVITATION_DEFAULT_PAIRINGS, parse_valid_for
from skulk_core.operator.relay import (
    MAX_PROVISIONING_BYTES,
    ProvisioningError,
    parse_provisioning,
)
from skulk_daemon.operator import listener_record
from skulk_daemon.operator.errors import AuthorityError
from skulk_daemon.operator.listener_record import ListenerNotBound
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.system.settings import Settings, resolve_settings

DEFAULT_VALID_FOR = "1d"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m skulk_daemon.operator", add_help=False)
    parser.add_argument("--data-dir")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    pair = commands.add_parser("pair", add_help=False)
    pair.add_argument("--cluster-name")
    pair.add_argument("--exchange-url")
    pair.add_argument("--valid-for")
    pair.add_argument("--max-pairings", type=int)

    invitations = commands.add_parser("invitations", add_help=False)
    actions = invitations.add_subparsers(dest="action", required=True, parser_class=_Parser)
    actions.add_parser("list", add_help=False)
    revoke = actions.add_parser("revoke", add_help=False)
    revoke.add_argument("invitation_id")

    relay = commands.add_parser("configure-relay", add_help=False)
    relay.add_argument("--provisioning-file", required=True)
    relay.add_argument("--operator-api-port", type=int, required=True)
    relay.add_argument("--cluster-name", required=True)
    relay.add_argument("--replace", action="store_true")
    return parser


def _listener_port(
    service: OperatorPairingService, settings: Settings, args: argparse.Namespace
) -> int | None:
    """The operator port a package without ``--exchange-url`` names.

    The running node's (it publishes the port it serves); with no node running, the
    port it will serve with this environment (``SKULK_OPERATOR_API_PORT``), else the
    stored or default port (``None`` here).
    """
    if args.exchange_url is not None:
        return None
    try:
        port = listener_record.running_port(service.directory, wait_s=0)
    except ListenerNotBound:
        # A node on port 0 binds only once it is a gateway: make it one, then wait.
        service.initialize(args.cluster_name)
        port = listener_record.running_port(service.directory)
    return port if port is not None else settings.operator_api_port or None


def _pair(
    service: OperatorPairingService, settings: Settings, args: argparse.Namespace
) -> dict[str, object]:
    port = _listener_port(service, settings, args)
    if args.valid_for is not None or args.max_pairings is not None:
        valid_for = parse_valid_for(args.valid_for or DEFAULT_VALID_FOR)
        max_pairings = (
            INVITATION_DEFAULT_PAIRINGS if args.max_pairings is None else args.max_pairings
        )
        issue = service.create_invitation(
            valid_for,
            max_pairings,
            args.exchange_url,
            cluster_name=args.cluster_name,
            initialize=True,
            listener_port=port,
        )
    else:
        issue = service.create_session(
            args.exchange_url, cluster_name=args.cluster_name, initialize=True, listener_port=port
        )
    identity = service.gateway_identity()  # writes the listener's TLS files if missing
    return {
        "kind": issue.kind,
        "uri": issue.uri,
        "expiresAt": issue.expires_at,
        "invitation": None if issue.invitation is None else msgspec.to_builtins(issue.invitation),
        "clusterId": identity.cluster_id,
        "clusterName": identity.cluster_name,
        "fingerprint": identity.fingerprint,
    }


def _read_provisioning(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise ProvisioningError(f"cannot open the provisioning file: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ProvisioningError("the provisioning file is not a regular file")
        return handle.read(MAX_PROVISIONING_BYTES + 1)


def _run(args: argparse.Namespace) -> dict[str, object]:
    settings = resolve_settings(data_dir=args.data_dir)
    service = OperatorPairingService.open(settings.data_dir)
    if args.command == "pair":
        return _pair(service, settings, args)
    if args.command == "invitations":
        if args.action == "list":
            return {"invitations": msgspec.to_builtins(service.list_invitations())}
        service.revoke_invitation(args.invitation_id)
        return {"revoked": args.invitation_id}
    provisioning = parse_provisioning(_read_provisioning(Path(args.provisioning_file)))
    service.configure_relay(
        provisioning, args.operator_api_port, args.cluster_name, replace=args.replace
    )
    return {"configured": True, "version": provisioning.version}


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except _UsageError as exc:
        _emit({"error": str(exc)})
        return 2
    try:
        result = _run(args)
    except (AuthorityError, ProvisioningError, ListenerNotBound) as exc:
        _emit({"error": str(exc)})
        return 1
    except ValueError as exc:  # a flag's value, e.g. --valid-for
        _emit({"error": str(exc)})
        return 1
    except OSError as exc:
        _emit({"error": f"{exc.strerror or 'I/O error'}: {exc.filename or 'the data directory'}"})
        return 1
    _emit(result)
    return 0


def _emit(document: dict[str, object]) -> None:
    sys.stdout.write(msgspec.json.encode(document).decode() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
