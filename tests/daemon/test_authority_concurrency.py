"""Racing transitions: exactly one exchange wins, and attempt limits hold under load."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from skulk_core.operator.package import InvitationPackage, decode_pairing_uri
from skulk_daemon.operator.errors import AuthorityError, Conflict, TooManyAttempts
from tests.daemon.authority_support import Device, make_service

ROOT = Path(__file__).resolve().parents[2]


def _race(calls: list[Callable[[], object]]) -> list[object]:
    barrier = threading.Barrier(len(calls))
    outcomes: list[object] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = calls[index]()
        except AuthorityError as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_concurrent_exchanges_of_one_session_exactly_one_wins(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = decode_pairing_uri(service.create_session().uri)
    device = Device()
    challenge = service.challenge(package.nonce, "d", device.public_key)
    signature = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    outcomes = _race([lambda: service.exchange(package.nonce, signature)] * 8)
    winners = [o for o in outcomes if not isinstance(o, AuthorityError)]
    assert len(winners) == 1
    assert all(isinstance(o, Conflict) for o in outcomes if o not in winners)
    assert len(service.list_devices()) == 1


EXCHANGE = """
import sys, time
from pathlib import Path
from skulk_daemon.operator.clock import ManualClock
from skulk_daemon.operator.errors import AuthorityError
from skulk_daemon.operator.service import OperatorPairingService
data, me, nonce, signature, now = Path(sys.argv[1]), *sys.argv[2:5], float(sys.argv[5])
service = OperatorPairingService.open(data, clock=ManualClock(now))
(data / f"ready-{me}").touch()
while not (data / "go").exists():
    time.sleep(0.0005)
try:
    print("won", service.exchange(nonce, signature).device_id)
except AuthorityError as exc:
    print("lost", exc.status)
"""


def test_two_processes_racing_one_exchange_exactly_one_wins(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    package = decode_pairing_uri(service.create_session().uri)
    device = Device()
    challenge = service.challenge(package.nonce, "d", device.public_key)
    signature = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    argv = [str(tmp_path), "", package.nonce, signature, str(clock.now + 1)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", EXCHANGE, *argv[:1], str(n), *argv[2:]],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in range(2)):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    (tmp_path / "go").touch()
    outputs = sorted(p.communicate(timeout=60)[0].split() for p in procs)
    assert [output[0] for output in outputs] == ["lost", "won"]
    assert outputs[0][1] == "409"
    [device_row] = service.list_devices()
    assert device_row.active


def test_eleven_simultaneous_scans_open_exactly_ten_attempts(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = decode_pairing_uri(service.create_invitation(3600, 20).uri)
    assert isinstance(package, InvitationPackage)

    def scan(device: Device) -> Callable[[], object]:
        return lambda: service.challenge(
            package.nonce, "d", device.public_key, package.invitation_id
        )

    outcomes = _race([scan(Device()) for _ in range(11)])
    refused = [o for o in outcomes if isinstance(o, AuthorityError)]
    assert len(refused) == 1 and isinstance(refused[0], TooManyAttempts)
    assert service.list_invitations()[0].active_attempts == 10
