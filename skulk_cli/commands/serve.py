"""`skulk serve` (and bare `skulk`): become the node daemon."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from skulk_core.config import LogLevel

DAEMON_MODULE = "skulk_daemon"

# Read by the daemon itself, so `skulk serve` passes only the flags a user typed.
# Listed here so the man pages can document them.
NODE_ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("SKULK_HOST", "Address the HTTP API listens on, when --host is not given (0.0.0.0)."),
    ("SKULK_API_PORT", "HTTP API port, when --api-port is not given (52415)."),
    (
        "SKULK_DATA_DIR",
        "Node data, when --data-dir is not given (~/.local/share/skulk).",
    ),
    (
        "SKULK_MODELS_DIR",
        "Model files, when --models-dir is not given (else model_store.models_dir in "
        "skulk.yaml, else models/ in the data directory).",
    ),
    (
        "SKULK_CONFIG_HOME",
        "Directory holding skulk.yaml, when --config-home is not given (~/.config/skulk).",
    ),
    ("SKULK_FABRIC_PORT", "Cluster fabric port, when --fabric-port is not given (52416)."),
    (
        "SKULK_OPERATOR_API_PORT",
        "Loopback TLS port of a gateway's operator listener for paired devices, when "
        "--operator-api-port is not given (52417; 0: any free port).",
    ),
    ("SKULK_PEERS", "Comma-separated peer fabric addresses (host:port), added to --peer."),
    (
        "SKULK_CLUSTER_KEY",
        "The cluster's pre-shared key (else cluster.key in skulk.yaml, else a key generated "
        "into the data directory on first start). Every node of a cluster needs the same one.",
    ),
    ("SKULK_MDNS", "0 turns off mDNS discovery on the LAN."),
    (
        "SKULK_LOG_LEVEL",
        "Log level (debug, info, warning, error), when --log-level is not given (else "
        "logging.level in skulk.yaml, else info).",
    ),
    ("SKULK_FORCE_MASTER", "1 makes this node win every master election."),
)


@dataclass(frozen=True)
class NodeOptions:
    """The daemon flags a user gave; ``None`` leaves the daemon's own default."""

    host: str | None = None
    api_port: int | None = None
    data_dir: Path | None = None
    models_dir: Path | None = None
    config_home: Path | None = None
    fabric_port: int | None = None
    peers: tuple[str, ...] = ()
    force_master: bool = False
    no_mdns: bool = False
    operator_api_port: int | None = None
    log_level: LogLevel | None = None


def daemon_argv(python: str, options: NodeOptions) -> list[str]:
    """The exact argv that `python -m skulk_daemon` is exec'd with."""
    argv = [python, "-m", DAEMON_MODULE]
    flags = (
        ("--host", options.host),
        ("--api-port", options.api_port),
        ("--data-dir", options.data_dir),
        ("--models-dir", options.models_dir),
        ("--config-home", options.config_home),
    )
    for flag, value in flags:
        if value is not None:
            argv += [flag, str(value)]
    if options.fabric_port is not None:
        argv += ["--fabric-port", str(options.fabric_port)]
    if options.operator_api_port is not None:
        argv += ["--operator-api-port", str(options.operator_api_port)]
    for peer in options.peers:
        argv += ["--peer", peer]
    if options.force_master:
        argv.append("--force-master")
    if options.no_mdns:
        argv.append("--no-mdns")
    if options.log_level is not None:
        argv += ["--log-level", options.log_level.value]
    return argv


def exec_daemon(options: NodeOptions) -> NoReturn:
    """Replace this process with the daemon.

    NOTE: exec, not a child process: Ctrl-C and SIGTERM from a service manager reach
    the daemon itself, it keeps this PID, and its exit code is the command's.
    """
    argv = daemon_argv(sys.executable, options)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
    raise AssertionError("os.execv returned")  # pragma: no cover - execv never returns


def serve(
    *,
    host: Annotated[
        str | None,
        typer.Option(
            "--host", metavar="HOST", help="Address the HTTP API listens on (0.0.0.0: all)."
        ),
    ] = None,
    api_port: Annotated[
        int | None,
        typer.Option("--api-port", metavar="PORT", min=1, max=65535, help="HTTP API port."),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir", metavar="DIR", help="Node data: event log, authority store, traces."
        ),
    ] = None,
    models_dir: Annotated[
        Path | None,
        typer.Option("--models-dir", metavar="DIR", help="Where model files are stored."),
    ] = None,
    config_home: Annotated[
        Path | None,
        typer.Option("--config-home", metavar="DIR", help="Directory holding skulk.yaml."),
    ] = None,
    fabric_port: Annotated[
        int | None,
        typer.Option(
            "--fabric-port", metavar="PORT", min=1, max=65535, help="Cluster fabric port."
        ),
    ] = None,
    peer: Annotated[
        list[str] | None,
        typer.Option(
            "--peer",
            metavar="HOST:PORT",
            help="A peer's fabric address, for networks mDNS does not reach; repeatable.",
        ),
    ] = None,
    operator_api_port: Annotated[
        int | None,
        typer.Option(
            "--operator-api-port",
            metavar="PORT",
            min=0,
            max=65535,
            help="Loopback TLS port for paired devices, on a gateway (`skulk operator "
            "pair`); 0: any free port.",
        ),
    ] = None,
    force_master: Annotated[
        bool, typer.Option("--force-master", help="Win every master election.")
    ] = False,
    no_mdns: Annotated[
        bool, typer.Option("--no-mdns", help="Do not announce or discover peers with mDNS.")
    ] = False,
    log_level: Annotated[
        LogLevel | None,
        typer.Option(
            "--log-level",
            help="Log level, over logging.level in skulk.yaml. The node logs to stderr and "
            "to logs/skulk.log in its data dir (`skulk logs`).",
        ),
    ] = None,
) -> None:
    """Run this machine's Skulk node in the foreground.

    The node finds its peers, joins the cluster and serves the HTTP API. Options not
    given fall back to the node's environment variables and then its defaults.
    Running `skulk` with no command does the same.
    """
    exec_daemon(
        NodeOptions(
            host,
            api_port,
            data_dir,
            models_dir,
            config_home,
            fabric_port=fabric_port,
            peers=tuple(peer or ()),
            force_master=force_master,
            no_mdns=no_mdns,
            operator_api_port=operator_api_port,
            log_level=log_level,
        )
    )
