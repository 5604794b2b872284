"""System-service registration: the fixed sudo helper against a temporary filesystem
root (``SKULK_SYSTEM_HELPER_PREFIX``), with ``sudo``, ``systemctl`` and ``launchctl``
executables that record their arguments, and setup's refusals and honest fallback."""

from __future__ import annotations

import os
import plistlib
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skulk_cli.plugin_service import registration, system_helper
from skulk_cli.plugin_service.system_helper import launchd_plist, systemd_unit
from tests.plugins.runtime_copies import SessionRuntime
from tests.plugins.terminal import Terminal

REPO_ROOT = Path(__file__).resolve().parents[2]
OWNER = 65534  # nobody: a real nonroot account on this host
NAME = f"foundation.foxlight.skulk.plugins.u{OWNER}"
HELPER = Path(system_helper.__file__)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="writes root-owned files"),
    pytest.mark.xdist_group("plugin_runtime"),
]

SYSTEMCTL = """#!/bin/sh
state={state}
echo "$*" >> "$state/systemctl.log"
case "$1" in
  is-system-running) cat "$state/system-state";;
  daemon-reload) ;;
  enable) touch "$state/enabled-$2";;
  restart) [ -e "$state/fail-restart" ] && exit 1; touch "$state/active-$2";;
  is-enabled) [ -e "$state/enabled-$2" ] && echo enabled || {{ echo disabled; exit 1; }};;
  is-active) [ -e "$state/active-$2" ] && echo active || {{ echo inactive; exit 3; }};;
  *) exit 1;;
esac
"""
LAUNCHCTL = """#!/bin/sh
echo "$*" >> {state}/launchctl.log
"""
SUDO = """#!/bin/sh
state={state}
echo "$*" >> "$state/sudo.log"
if [ "$1" = "-n" ]; then
  shift
  if [ -e "$state/needs-password" ]; then echo "sudo: a password is required" >&2; exit 1; fi
fi
export SUDO_UID={uid}
exec "$@"
"""


@dataclass
class System:
    """A temporary filesystem root with fake service tools, and a PATH to them."""

    prefix: Path
    state: Path
    env: dict[str, str]

    @property
    def root(self) -> Path:
        return self.prefix / "var/lib/skulk-plugin-services" / str(OWNER)

    @property
    def unit(self) -> Path:
        return self.prefix / "etc/systemd/system" / f"{NAME}.service"

    def log(self, tool: str) -> list[str]:
        path = self.state / f"{tool}.log"
        return path.read_text().splitlines() if path.exists() else []

    def helper(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-I", "-S", str(HELPER), *args],
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            check=False,
        )

    def stage_runtime(self) -> None:
        """What staging leaves behind: a generation selected through ``current``."""
        python = self.root / "runtimes/g1/bin/python"
        python.parent.mkdir(parents=True)
        python.write_text("")
        (self.root / "runtimes/current").symlink_to("g1")


def _tool(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[System]:
    prefix, state, bin_ = tmp_path / "fs", tmp_path / "state", tmp_path / "bin"
    for directory in ("var/lib", "etc/systemd/system", "Library/Application Support"):
        (prefix / directory).mkdir(parents=True, mode=0o755)
    (prefix / "Library/LaunchDaemons").mkdir(mode=0o755)
    state.mkdir()
    (state / "system-state").write_text("running\n")
    systemctl = SYSTEMCTL.format(state=state)
    for place in (bin_ / "systemctl", prefix / "usr/bin/systemctl"):
        _tool(place, systemctl)
    _tool(prefix / "bin/launchctl", LAUNCHCTL.format(state=state))
    _tool(bin_ / "sudo", SUDO.format(state=state, uid=OWNER))
    path = f"{bin_}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv(system_helper.PREFIX_ENV, str(prefix))
    env = {"PATH": path, system_helper.PREFIX_ENV: str(prefix)}
    yield System(prefix=prefix, state=state, env=env)


def test_the_unit_is_fixed_and_literal() -> None:
    root = Path("/var/lib/skulk-plugin-services/1000")
    unit = systemd_unit(1000, root, tls=False)
    lines = unit.splitlines()
    current = f"{root}/runtimes/current"
    assert (
        f"ExecStart={current}/bin/python -I -S -B {current}/bootstrap.py serve --root "
        f"{root}/manager --sealed-runtime" in lines
    )
    assert {"User=1000", f"WorkingDirectory={root}", "Restart=always"} <= set(lines)
    assert "WantedBy=multi-user.target" in lines and "default.target" not in unit
    with_ca = systemd_unit(1000, root, tls=True)
    assert f"--sealed-runtime --tls-ca {root}/tls-ca.pem\n" in with_ca
    legacy = systemd_unit(1000, root, tls=False, legacy=True)
    assert legacy == unit.replace(f"WorkingDirectory={root}", f'WorkingDirectory="{root}"')
    earlier = systemd_unit(1000, root, tls=False, earlier=True)
    assert (
        f"ExecStart={current}/bin/python -I -B -m skulk.extensions.runtime_manager serve "
        f"--root {root}/manager --sealed-runtime" in earlier.splitlines()
    )
    with pytest.raises(system_helper.Refused, match="characters a systemd unit cannot carry"):
        systemd_unit(1000, Path("/tmp/a b"), tls=False)


def test_the_launch_daemon_plist_names_a_nonroot_user() -> None:
    root = Path("/Library/Application Support/SkulkPluginServices/501")
    body = plistlib.loads(launchd_plist(501, "owner", root, tls=False))
    assert body["Label"] == "foundation.foxlight.skulk.plugins.u501"
    assert body["UserName"] == "owner"
    assert body["ProgramArguments"] == [
        f"{root}/runtimes/current/bin/python",
        "-I",
        "-S",
        "-B",
        f"{root}/runtimes/current/bootstrap.py",
        "serve",
        "--root",
        f"{root}/manager",
        "--sealed-runtime",
    ]
    assert (body["KeepAlive"], body["RunAtLoad"], body["WorkingDirectory"]) == (
        True,
        True,
        str(root),
    )
    with_ca = plistlib.loads(launchd_plist(501, "owner", root, tls=True))
    assert with_ca["ProgramArguments"][-2:] == ["--tls-ca", f"{root}/tls-ca.pem"]


def test_the_helper_provisions_and_registers_a_root_owned_unit(system: System) -> None:
    provisioned = system.helper("provision-systemd", str(OWNER))
    assert provisioned.returncode == 0, provisioned.stderr
    parent = system.root.parent.stat()
    assert (parent.st_uid, stat.S_IMODE(parent.st_mode)) == (0, 0o755)
    own = system.root.stat()
    assert (own.st_uid, own.st_gid, stat.S_IMODE(own.st_mode)) == (OWNER, OWNER, 0o700)
    # No staged runtime yet: nothing is written.
    early = system.helper("register-systemd", str(OWNER))
    assert early.returncode == 3 and "No staged runtime is selected" in early.stderr
    assert not system.unit.exists()
    system.stage_runtime()
    done = system.helper("register-systemd", str(OWNER))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("written ")
    unit = system.unit.stat()
    assert (unit.st_uid, unit.st_gid, stat.S_IMODE(unit.st_mode)) == (0, 0, 0o644)
    assert system.unit.read_text() == systemd_unit(OWNER, system.root, tls=False)
    assert system.log("systemctl") == [
        "daemon-reload",
        f"enable {NAME}.service",
        f"restart {NAME}.service",
    ]
    assert not [p for p in system.unit.parent.iterdir() if p.name.startswith(".")]
    # The same definition again is left as it is.
    again = system.helper("register-systemd", str(OWNER))
    assert again.stdout.startswith("unchanged "), again.stderr
    # A CA copied into the root is passed by its fixed name, never the owner's path.
    (system.root / "tls-ca.pem").write_text("CA")
    with_ca = system.helper("register-systemd", str(OWNER))
    assert with_ca.stdout.startswith("repaired "), with_ca.stderr
    assert f"--tls-ca {system.root}/tls-ca.pem\n" in system.unit.read_text()


def test_an_unrelated_occupant_is_refused_and_the_quoted_unit_repaired(system: System) -> None:
    assert system.helper("provision-systemd", str(OWNER)).returncode == 0
    system.stage_runtime()
    foreign = "[Service]\nUser=0\nExecStart=/bin/sh -c 'echo other'\n"
    system.unit.write_text(foreign)
    refused = system.helper("register-systemd", str(OWNER))
    assert refused.returncode == 3
    assert "An unrelated definition occupies the reserved service name" in refused.stderr
    assert system.unit.read_text() == foreign and system.log("systemctl") == []
    # A link in the reserved name is not followed.
    system.unit.unlink()
    system.unit.symlink_to(system.root / "runtimes/g1/bin/python")
    assert system.helper("register-systemd", str(OWNER)).returncode == 3
    assert system.unit.is_symlink()
    # The exact earlier units (quoted WorkingDirectory; the command from before the
    # bootstrap) are replaced by the current one.
    for earlier in (
        systemd_unit(OWNER, system.root, tls=False, legacy=True, earlier=True),
        systemd_unit(OWNER, system.root, tls=False, earlier=True),
    ):
        system.unit.unlink()
        system.unit.write_text(earlier)
        repaired = system.helper("register-systemd", str(OWNER))
        assert repaired.returncode == 0, repaired.stderr
        assert repaired.stdout.startswith("repaired "), repaired.stdout
        text = system.unit.read_text()
        assert text == systemd_unit(OWNER, system.root, tls=False)
        assert f"WorkingDirectory={system.root}\n" in text and '"' not in text
        assert system.log("systemctl")[-1] == f"restart {NAME}.service"


def test_the_helper_takes_only_a_nonroot_uid_of_its_invoker(system: System) -> None:
    for uid, extra, sentence in (
        ("0", {}, "never as root"),
        ("-1", {}, "decimal number"),
        ("1x", {}, "decimal number"),
        (str(OWNER), {"SUDO_UID": "1000"}, "only the invoking user's service"),
        ("4242424", {}, "No account has the uid"),
    ):
        done = system.helper("provision-systemd", uid, **extra)
        assert done.returncode == 3 and sentence in done.stderr, (uid, done.stderr)
    usage = system.helper("register-systemd", str(OWNER), "/bin/sh")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    assert system.helper("write-unit", str(OWNER)).returncode == 2
    assert not system.root.parent.exists()
    # A parent that is not root's is not adopted; an owner root of another user neither.
    system.root.parent.mkdir()
    os.chown(system.root.parent, OWNER, OWNER)
    taken = system.helper("provision-systemd", str(OWNER))
    assert taken.returncode == 3 and "must be a directory owned by root" in taken.stderr
    os.chown(system.root.parent, 0, 0)
    system.root.mkdir()
    other = system.helper("provision-systemd", str(OWNER))
    assert other.returncode == 3 and f"owned by uid {OWNER}" in other.stderr


def test_the_launch_daemon_is_bootstrapped_in_the_system_domain(system: System) -> None:
    assert system.helper("provision-launchd", str(OWNER)).returncode == 0
    root = system.prefix / "Library/Application Support/SkulkPluginServices" / str(OWNER)
    assert root.stat().st_uid == OWNER
    python = root / "runtimes/current/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    done = system.helper("register-launchd", str(OWNER))
    assert done.returncode == 0, done.stderr
    plist = system.prefix / "Library/LaunchDaemons" / f"{NAME}.plist"
    info = plist.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
    body = plistlib.loads(plist.read_bytes())
    assert (body["UserName"], body["Label"]) == ("nobody", NAME)
    assert body["ProgramArguments"][0] == str(python)
    assert system.log("launchctl") == [
        f"enable system/{NAME}",
        f"bootout system/{NAME}",
        f"bootstrap system {plist}",
    ]
    # The daemon registered before the bootstrap is ours, and replaced.
    plist.write_bytes(launchd_plist(OWNER, "nobody", root, tls=False, earlier=True))
    repaired = system.helper("register-launchd", str(OWNER))
    assert repaired.stdout.startswith("repaired "), repaired.stdout + repaired.stderr
    assert plist.read_bytes() == launchd_plist(OWNER, "nobody", root, tls=False)
    plist.write_bytes(plistlib.dumps({"Label": NAME, "ProgramArguments": ["/bin/sh"]}))
    assert system.helper("register-launchd", str(OWNER)).returncode == 3


def test_setup_elevates_only_what_is_missing(system: System) -> None:
    said: list[str] = []
    root = registration.durable_root("systemd", OWNER)
    assert root == system.root
    assert registration.provision("systemd", root, said.append, uid=OWNER) is True
    assert system.log("sudo") == [
        f"-n {sys.executable} -I -S {HELPER.resolve()} provision-systemd {OWNER}"
    ]
    assert said == [
        f"Running the fixed system-service helper through sudo: provision-systemd {OWNER}."
    ]
    system.stage_runtime()
    assert registration.register("systemd", root, said.append, healthy=True, uid=OWNER)
    assert system.log("sudo")[-1].endswith(f"register-systemd {OWNER}")
    assert registration.installed_current("systemd", root, OWNER)
    assert registration.service_running("systemd", OWNER)
    # A healthy rerun needs no elevation at all.
    calls = len(system.log("sudo"))
    assert registration.provision("systemd", root, said.append, uid=OWNER) is False
    assert not registration.register("systemd", root, said.append, healthy=True, uid=OWNER)
    assert len(system.log("sudo")) == calls
    # A manager that does not answer, or a changed definition, is registered again.
    assert registration.register("systemd", root, said.append, healthy=False, uid=OWNER)
    registration.stage_tls_ca(root, str(_ca(system)))
    assert not registration.installed_current("systemd", root, OWNER)
    assert registration.register("systemd", root, said.append, healthy=True, uid=OWNER)
    assert len(system.log("sudo")) == calls + 2
    assert "--tls-ca" in system.unit.read_text()
    # A helper failure reaches the owner as its sentence.
    (system.state / "fail-restart").touch()
    with pytest.raises(registration.Unregistered, match=r"systemctl restart .* failed"):
        registration.register("systemd", root, said.append, healthy=False, uid=OWNER)


def _ca(system: System) -> Path:
    ca = system.state / "owner-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    return ca


def test_a_needed_password_is_asked_for_on_the_terminal(system: System) -> None:
    (system.state / "needs-password").touch()
    root = registration.durable_root("systemd", OWNER)
    assert root is not None
    with pytest.raises(registration.Unregistered, match="rerun setup in a terminal"):
        registration.provision("systemd", root, print, uid=OWNER)
    assert not root.exists()
    script = (
        "from pathlib import Path; from skulk_cli.plugin_service import registration; "
        f"print(registration.provision('systemd', Path({str(root)!r}), print, uid={OWNER}))"
    )
    terminal = Terminal([sys.executable, "-c", script], {**os.environ}, REPO_ROOT)
    terminal.expect("sudo needs your password to run it (it asks on this terminal).")
    terminal.expect("True")
    assert terminal.finish() == 0
    assert [line.split()[0] for line in system.log("sudo")] == ["-n", "-n", sys.executable]
    assert root.stat().st_uid == OWNER


def _setup(
    env: dict[str, str], home: Path, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "skulk_cli.plugin_service", "setup"],
        env={**env, "HOME": str(home), "SKULK_CONFIG_HOME": str(home / "config"), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )


def test_setup_refuses_sudo_and_a_root_owner(system: System, tmp_path: Path) -> None:
    under_sudo = _setup({**system.env, "SUDO_UID": "1000"}, tmp_path)
    assert under_sudo.returncode == 1
    assert "Do not run setup under sudo" in under_sudo.stderr
    as_root = _setup(system.env, tmp_path)
    assert as_root.returncode == 1
    assert "run setup as the Skulk owner, not as root" in as_root.stderr
    assert system.log("sudo") == [] and list((system.prefix / "var/lib").iterdir()) == []
    assert not (tmp_path / "config").exists()


def test_this_host_has_no_running_systemd_so_setup_says_so(
    tmp_path: Path, session_runtime: SessionRuntime
) -> None:
    detected = registration.detect()
    assert detected.kind == "none"
    assert "not running as the system's service manager" in detected.reason
    assert registration.default_root() is None
    # Setup itself: the real systemctl, a recording sudo that is never reached.
    state = tmp_path / "state"
    state.mkdir()
    _tool(tmp_path / "bin/sudo", SUDO.format(state=state, uid=OWNER))
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    # The session's staging, copied as hard links: setup verifies and reuses it.
    session_runtime.copy_into(tmp_path / ".local/share/skulk-plugin-service")
    try:
        # From the interpreter the staging ran setup from: setup finds that source here.
        done = _setup(env, tmp_path, str(session_runtime.python))
        assert done.returncode == 0, done.stderr
        assert f"not registered as a service ({detected.reason})" in done.stdout
        assert "skulk-plugin-service serve" in done.stdout
        assert not (state / "sudo.log").exists()
        assert (tmp_path / ".local/share/skulk-plugin-service/setup.json").is_file()
    finally:
        shutil.rmtree(tmp_path / ".local/share/skulk-plugin-service/runtimes", True)
    # Another root on a host whose systemd runs is not registered either.
    durable = registration.durable_root("systemd")
    assert durable is not None
    elsewhere = registration.fit(registration.Detected("systemd", ""), tmp_path)
    assert elsewhere.kind == "none" and str(durable) in elsewhere.reason
    assert registration.fit(registration.Detected("systemd", ""), durable).kind == "systemd"
