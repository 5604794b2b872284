"""A socket under a root deeper than ``sun_path`` still binds and answers (a manager root
in a deep home directory; the suite's own temporary directories under xdist)."""

from __future__ import annotations

import socket
from pathlib import Path

from skulk_host.unix_address import SUN_PATH_BYTES, addressable


def test_a_socket_deeper_than_sun_path_binds_and_answers(tmp_path: Path) -> None:
    directory = tmp_path / ("deep-" + "d" * 60) / ("deeper-" + "e" * 60)
    directory.mkdir(parents=True)
    path = directory / "control.sock"
    assert len(str(path)) >= SUN_PATH_BYTES
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        with addressable(path) as address:
            server.bind(address)
        server.listen()
        assert path.is_socket()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            with addressable(path) as address:
                client.connect(address)
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"ping")
                assert accepted.recv(4) == b"ping"


def test_a_short_path_is_its_own_address(tmp_path: Path) -> None:
    with addressable(tmp_path / "s.sock") as address:
        assert address == str(tmp_path / "s.sock")
