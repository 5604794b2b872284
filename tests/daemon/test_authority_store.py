"""The authority store: owner-only, encrypted, authenticated, crash-safe, never reset."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skulk_daemon.operator.errors import StoreCorrupt
from skulk_daemon.operator.service import OperatorPairingService
from tests.daemon.authority_support import make_service, pair_legacy

ROOT = Path(__file__).resolve().parents[2]
HEADER = 12 + 16 + 8 + 12 + 4


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_everything_is_owner_only(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    pair_legacy(service)
    directory = tmp_path / "operator"
    assert _mode(directory) == 0o700
    files = sorted(p.name for p in directory.iterdir())
    assert files == [
        "authority.key",
        "authority.lock",
        "authority.store",
        "gateway-tls.crt",
        "gateway-tls.key",
    ]
    for name in files:
        assert _mode(directory / name) == 0o600, name
    assert len((directory / "authority.key").read_bytes()) == 32


def test_a_loose_directory_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "operator").mkdir(mode=0o755)
    os.chmod(tmp_path / "operator", 0o755)
    make_service(tmp_path)
    assert _mode(tmp_path / "operator") == 0o700


def test_the_store_is_ciphertext(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    result = pair_legacy(service, name="Distinctive Device Name")
    blob = (tmp_path / "operator" / "authority.store").read_bytes()
    for visible in (
        b"Distinctive Device Name",
        b"Test Cluster",
        result.device_id.encode(),
        result.access_token.encode(),
        result.refresh_token.encode(),
        b"PRIVATE KEY",
    ):
        assert visible not in blob


def test_every_commit_advances_the_sequence(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    path = tmp_path / "operator" / "authority.store"
    first = int.from_bytes(path.read_bytes()[28:36], "big")
    service.create_session()
    assert int.from_bytes(path.read_bytes()[28:36], "big") == first + 1


@pytest.mark.parametrize(
    "offset",
    [0, 11, 12, 27, 28, 35, 36, 47, 48, 51, HEADER, HEADER + 10, -17, -1],
    ids=lambda o: f"byte{o}",
)
def test_a_changed_byte_refuses_to_open_and_is_never_reset(tmp_path: Path, offset: int) -> None:
    service, _ = make_service(tmp_path)
    pair_legacy(service)
    path = tmp_path / "operator" / "authority.store"
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0x01
    path.write_bytes(bytes(blob))
    tampered = path.read_bytes()

    with pytest.raises(StoreCorrupt):
        OperatorPairingService.open(tmp_path)
    fresh = OperatorPairingService(tmp_path)
    for call in (
        fresh.is_gateway,
        fresh.list_devices,
        fresh.create_session,
        lambda: fresh.initialize("Other"),
        lambda: fresh.authenticate("A" * 43),
    ):
        with pytest.raises(StoreCorrupt):
            call()
    assert path.read_bytes() == tampered


@pytest.mark.parametrize("keep", [0, 5, HEADER - 1, HEADER, HEADER + 1, -1])
def test_a_truncated_store_refuses(tmp_path: Path, keep: int) -> None:
    service, _ = make_service(tmp_path)
    path = tmp_path / "operator" / "authority.store"
    blob = path.read_bytes()
    path.write_bytes(blob[:keep])
    with pytest.raises(StoreCorrupt):
        OperatorPairingService.open(tmp_path)
    with pytest.raises(StoreCorrupt):
        service.create_session()
    assert path.read_bytes() == blob[:keep]


def test_trailing_bytes_refuse(tmp_path: Path) -> None:
    make_service(tmp_path)
    path = tmp_path / "operator" / "authority.store"
    path.write_bytes(path.read_bytes() + b"\x00")
    with pytest.raises(StoreCorrupt):
        OperatorPairingService.open(tmp_path)


def test_a_missing_wrong_or_exposed_key_refuses(tmp_path: Path) -> None:
    make_service(tmp_path)
    key = tmp_path / "operator" / "authority.key"
    original = key.read_bytes()

    key.unlink()
    with pytest.raises(StoreCorrupt, match="missing"):
        OperatorPairingService.open(tmp_path)

    key.write_bytes(os.urandom(32))
    os.chmod(key, 0o600)
    with pytest.raises(StoreCorrupt, match="authentication"):
        OperatorPairingService.open(tmp_path)

    key.write_bytes(original)
    os.chmod(key, 0o644)
    with pytest.raises(StoreCorrupt, match="other users"):
        OperatorPairingService.open(tmp_path)

    os.chmod(key, 0o600)
    assert OperatorPairingService.open(tmp_path).is_gateway()


def test_swapping_generations_between_stores_refuses(tmp_path: Path) -> None:
    # Each store seals with its own key and id: one store's file is garbage to another.
    make_service(tmp_path / "a")
    make_service(tmp_path / "b")
    blob = (tmp_path / "a" / "operator" / "authority.store").read_bytes()
    (tmp_path / "b" / "operator" / "authority.store").write_bytes(blob)
    with pytest.raises(StoreCorrupt):
        OperatorPairingService.open(tmp_path / "b")


def test_a_failed_commit_leaves_the_previous_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, _ = make_service(tmp_path)
    path = tmp_path / "operator" / "authority.store"
    before = path.read_bytes()

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    # atomic_write's rename is the commit point: fail it like a full disk would.
    monkeypatch.setattr("skulk_host.fsutil.os.replace", crash)
    with pytest.raises(OSError):
        service.create_session()
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert OperatorPairingService.open(tmp_path).list_invitations() == []
    assert service.create_session().uri


WORKER = """
import sys, time
from pathlib import Path
from skulk_daemon.operator.service import OperatorPairingService
data, me = Path(sys.argv[1]), sys.argv[2]
service = OperatorPairingService.open(data)
(data / f"ready-{me}").touch()
while not (data / "go").exists():
    time.sleep(0.001)
for _ in range(40):
    service.create_invitation(3600, 1)
"""


def race(tmp_path: Path, worker: str, count: int = 2) -> list[int]:
    """Run ``worker`` in ``count`` processes that start their loops at the same moment."""
    procs = [
        subprocess.Popen([sys.executable, "-c", worker, str(tmp_path), str(n)], cwd=ROOT)
        for n in range(count)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in range(count)):
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    return [p.wait(timeout=120) for p in procs]


def test_two_processes_never_lose_a_write(tmp_path: Path) -> None:
    make_service(tmp_path)
    assert race(tmp_path, WORKER) == [0, 0]
    assert len(OperatorPairingService.open(tmp_path).list_invitations()) == 80


def test_the_race_is_real_without_the_lock(tmp_path: Path) -> None:
    # Proof that the test above can fail: the same race with flock disabled loses writes.
    make_service(tmp_path)
    # (The read-modify-write window is widened a little so the overlap is certain.)
    unlocked = (
        "import fcntl, time\n"
        "fcntl.flock = lambda fd, op: None\n"
        "from skulk_daemon.operator.store import AuthorityStore\n"
        "_write = AuthorityStore._write\n"
        "AuthorityStore._write = lambda self, *a: (time.sleep(0.003), _write(self, *a))[1]\n"
    ) + WORKER
    assert race(tmp_path, unlocked) == [0, 0]
    assert len(OperatorPairingService.open(tmp_path).list_invitations()) < 80
