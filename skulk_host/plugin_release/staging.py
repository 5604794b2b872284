"""Offline staging of a verified release into its own sealed virtual environment.

One generation per release digest, under ``<root>/generations/<runtime_digest>/``:

1. ``intent.json`` is written (atomically, fsynced) before any effect;
2. the cached artifacts are checked again (exact size and SHA-256 as signed), every
   wheel is inspected as data (``wheels.py``), so is the bundle archive if the release
   signs one (``archive.py``), and each launcher has exactly one source: the owner is
   the archive's ``__owner__.py`` or the one wheel declaring ``owner`` under
   ``skulk.capability_runtime`` (both, or neither, is refused); ``setup`` and
   ``manage`` are optional but likewise never declared twice; the host compatibility
   is checked again;
3. ``runtime/`` is made from the base interpreter and the installer installs exactly
   those wheel files by pinned hash, offline (``installers.py``), its bounded output kept
   in ``installer.log``;
4. the runtime's inventory must be exactly the signed distributions; the archive is
   extracted into ``bundle/``;
5. ``seal.json`` and ``bundle-seal.json`` (the measured manifests) and last
   ``complete.json`` (their digests and the bundle's shims, fsynced) complete it.

A generation without ``complete.json`` is never runnable: a crash anywhere before it
leaves ``recovery_required`` with its evidence (intent, partial runtime, installer
output) in place, and staging the same digest again is refused rather than silently
rerun. Only :meth:`Stager.recover` rebuilds, after moving the old attempt aside as
evidence. :meth:`Stager.launcher` and :meth:`Stager.owner_command` check the seals
(runtime and bundle; a bundle the generation was not sealed with is refused too) before
anything starts, and launchers run with ``-I -B`` so running cannot change what was
sealed.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, NoReturn

import msgspec

from skulk_core.plugins.documents import HostFacts
from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_core.plugins.verify import VerifiedRelease, check_host
from skulk_host.fsutil import atomic_write, ensure_private_dir
from skulk_host.plugin_release import seal
from skulk_host.plugin_release.archive import (
    BUNDLE_DIR,
    KINDS,
    SHIM_LOADER,
    SHIMS,
    BundleFacts,
    Kind,
    extract_archive,
    inspect_archive,
)
from skulk_host.plugin_release.installers import Installer, default_installer
from skulk_host.plugin_release.wheels import (
    RUNTIME_GROUP,
    WheelFacts,
    declared_entries,
    inspect_wheel,
)
from skulk_host.plugin_service.bootstrap import file_sha256

INSTALLER_OUTPUT_BYTES: Final = 64 * 1024
"""Installer output kept as evidence is bounded to this."""
INSTALLER_TIMEOUT_SECONDS: Final = 600.0
ENTRY: Final = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)
_SCRUBBED_PREFIXES: Final = ("UV_", "PIP_", "PYTHON", "VIRTUAL_ENV", "CONDA")

GenerationState = Literal["absent", "complete", "recovery_required"]
FailureCode = Literal["installation_failed", "installation_interrupted"]


class StagingIntent(msgspec.Struct, frozen=True, kw_only=True):
    runtime_digest: str
    bundle_id: str
    version: str
    sequence: int
    permissions: tuple[str, ...]
    installer: str
    wheels: tuple[tuple[str, str], ...]
    started_at: int
    archive: tuple[str, str] | None = None


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    runtime_digest: str
    seal_sha256: str
    owner_entry: str
    file_count: int
    completed_at: int
    bundle_seal_sha256: str | None = None
    """The seal of ``bundle/``; ``None``: the release signs no archive."""
    bundle_shims: tuple[Kind, ...] = ()
    """The launchers the sealed bundle carries (``owner``, ``setup``, ``manage``)."""


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    code: FailureCode
    detail: str


@dataclass(frozen=True, slots=True)
class Launcher:
    """What starts one launcher of a sealed generation: ``entry`` (``module:function``)
    with ``site`` on the path and, for an archive shim, ``bundle``'s shim file loaded as
    that module."""

    entry: str
    site: Path
    bundle: Path | None


class GenerationStatus(msgspec.Struct, frozen=True, kw_only=True):
    runtime_digest: str
    state: GenerationState
    error_code: FailureCode | None = None
    evidence: tuple[str, ...] = ()
    """Names of the retained evidence files in the generation (never host paths)."""


def _write(path: Path, value: msgspec.Struct) -> None:
    atomic_write(path, msgspec.json.encode(value))


class Stager:
    """Stages and checks the generations of one installation under ``root``."""

    def __init__(self, root: Path, installer: Installer | None = None) -> None:
        self.root = root
        self.installer = installer or default_installer()

    def generation(self, runtime_digest: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", runtime_digest):
            raise refuse("malformed", "A runtime digest is 64 lowercase hexadecimal characters.")
        return self.root / "generations" / runtime_digest

    def status(self, runtime_digest: str) -> GenerationStatus:
        directory = self.generation(runtime_digest)
        if not directory.exists():
            return GenerationStatus(runtime_digest=runtime_digest, state="absent")
        if (directory / "complete.json").is_file():
            return GenerationStatus(runtime_digest=runtime_digest, state="complete")
        code: FailureCode = "installation_interrupted"
        failure = directory / "failure.json"
        if failure.is_file():
            code = msgspec.json.decode(failure.read_bytes(), type=Failure).code
        evidence = tuple(sorted(p.name for p in directory.iterdir()))
        return GenerationStatus(
            runtime_digest=runtime_digest,
            state="recovery_required",
            error_code=code,
            evidence=evidence,
        )

    # -- staging -----------------------------------------------------------------------

    def stage(self, release: VerifiedRelease, artifacts: Path, host: HostFacts) -> GenerationStatus:
        """Stage ``release`` from the verified files in ``artifacts``; idempotent for a
        completed generation, refused for an interrupted or failed one."""
        current = self.status(release.runtime_digest)
        if current.state == "complete":
            self.completion(release.runtime_digest)
            return current
        if current.state == "recovery_required":
            raise refuse(
                "recovery_required",
                "An earlier staging of this release did not complete; its evidence is kept "
                "and it needs explicit recovery.",
            )
        check_host(release.claims, host)
        facts, bundle = self._check_artifacts(release, artifacts)
        owner = _owner_entry(facts, bundle)
        directory = self.generation(release.runtime_digest)
        ensure_private_dir(directory.parent)
        directory.mkdir(mode=0o700)
        claims = release.claims
        _write(
            directory / "intent.json",
            StagingIntent(
                runtime_digest=release.runtime_digest,
                bundle_id=claims.bundle_id,
                version=claims.version,
                sequence=claims.sequence,
                permissions=claims.permissions,
                installer=self.installer.name,
                wheels=tuple((w.filename, w.sha256) for w in claims.runtime.wheels),
                started_at=int(time.time()),
                archive=None
                if claims.runtime.archive is None
                else (claims.runtime.archive.filename, claims.runtime.archive.sha256),
            ),
        )
        runtime = directory / "runtime"
        requirements = directory / "requirements.txt"
        atomic_write(
            requirements,
            "".join(
                f"{(artifacts / w.filename).resolve()} --hash=sha256:{w.sha256}\n"
                for w in claims.runtime.wheels
            ).encode(),
        )
        log = directory / "installer.log"
        self._run(self.installer.create_environment(runtime), log, directory)
        if claims.runtime.wheels:  # a self-contained bundle installs nothing
            self._run(self.installer.install(runtime, requirements), log, directory)
        self._check_inventory(runtime, facts, directory)
        bundle_seal = None
        if claims.runtime.archive is not None:
            bundle_seal = self._extract(artifacts / claims.runtime.archive.filename, directory)
        manifest = seal.measure(runtime)
        atomic_write(directory / "seal.json", msgspec.json.encode(manifest))
        _write(
            directory / "complete.json",
            Completion(
                runtime_digest=release.runtime_digest,
                seal_sha256=seal.digest(manifest),
                owner_entry=owner,
                file_count=len(manifest["files"]),
                completed_at=int(time.time()),
                bundle_seal_sha256=bundle_seal,
                bundle_shims=() if bundle is None else bundle.shims,
            ),
        )
        return self.status(release.runtime_digest)

    def recover(
        self, release: VerifiedRelease, artifacts: Path, host: HostFacts
    ) -> GenerationStatus:
        """Explicitly rebuild a generation that needs recovery: the old attempt is kept
        as evidence under ``generations/.evidence/`` first; nothing is ever re-sealed."""
        directory = self.generation(release.runtime_digest)
        if self.status(release.runtime_digest).state == "complete":
            try:
                self.completion(release.runtime_digest)
            except PluginRefusal:
                pass  # a damaged completed generation is rebuilt, never re-sealed
            else:
                return self.status(release.runtime_digest)
        if directory.exists():
            evidence = directory.parent / ".evidence"
            ensure_private_dir(evidence)
            attempt = len(list(evidence.glob(f"{release.runtime_digest}-*"))) + 1
            os.replace(directory, evidence / f"{release.runtime_digest}-{attempt}")
        return self.stage(release, artifacts, host)

    def _check_artifacts(
        self, release: VerifiedRelease, artifacts: Path
    ) -> tuple[list[WheelFacts], BundleFacts | None]:
        for artifact in release.claims.runtime.artifacts:
            path = artifacts / artifact.filename
            if not path.is_file() or path.is_symlink():
                raise refuse("digest_mismatch", f"{artifact.filename} has not been downloaded.")
            if path.stat().st_size != artifact.bytes or file_sha256(path) != artifact.sha256:
                raise refuse(
                    "digest_mismatch", f"{artifact.filename} no longer matches its signed digest."
                )
        facts = [inspect_wheel(artifacts / w.filename) for w in release.claims.runtime.wheels]
        archive = release.claims.runtime.archive
        return facts, None if archive is None else inspect_archive(artifacts / archive.filename)

    def _extract(self, archive: Path, directory: Path) -> str:
        """Extract the inspected archive into ``bundle/`` and seal it; its seal digest."""
        bundle = directory / BUNDLE_DIR
        try:
            extract_archive(archive, bundle)
        except (PluginRefusal, OSError) as exc:
            self._fail(directory, f"the bundle archive did not extract ({type(exc).__name__})")
        manifest = seal.measure(bundle)
        atomic_write(directory / "bundle-seal.json", msgspec.json.encode(manifest))
        return seal.digest(manifest)

    def _run(self, argv: list[str], log: Path, directory: Path) -> None:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(_SCRUBBED_PREFIXES)
        }
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["UV_NO_CONFIG"] = "1"
        env["UV_OFFLINE"] = "1"
        env["PIP_NO_INDEX"] = "1"
        with log.open("ab") as output:
            output.write(f"$ {Path(argv[0]).name} {' '.join(argv[1:])}\n".encode())
            output.flush()
            try:
                completed = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=directory,
                    timeout=INSTALLER_TIMEOUT_SECONDS,
                    check=False,
                )
                returncode = completed.returncode
            except (OSError, subprocess.TimeoutExpired) as exc:
                returncode = -1
                output.write(f"installer did not run: {type(exc).__name__}\n".encode())
        _bound(log)
        if returncode != 0:
            self._fail(directory, f"installer exited with {returncode}")

    def _fail(self, directory: Path, detail: str) -> NoReturn:
        _write(directory / "failure.json", Failure(code="installation_failed", detail=detail))
        raise refuse(
            "installer_failed",
            f"Offline installation failed ({detail}); the evidence is kept for recovery.",
        )

    def _check_inventory(self, runtime: Path, facts: list[WheelFacts], directory: Path) -> None:
        expected = {(_canonical(f.distribution), f.version) for f in facts}
        found: set[tuple[str, str]] = set()
        for info in runtime.glob("lib/python*/site-packages/*.dist-info"):
            name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
            if _canonical(name) in self.installer.tooling:
                continue
            found.add((_canonical(name), version))
        if found != expected:
            self._fail(directory, "the staged environment does not hold exactly the signed wheels")

    # -- running -----------------------------------------------------------------------

    def completion(self, runtime_digest: str) -> Completion:
        """The completed generation's record, after checking its seal."""
        directory = self.generation(runtime_digest)
        marker = directory / "complete.json"
        if not marker.is_file():
            raise refuse("recovery_required", "This release has no completed staged runtime.")
        done = msgspec.json.decode(marker.read_bytes(), type=Completion)
        seal.check(directory / "runtime", done.seal_sha256)
        bundle = directory / BUNDLE_DIR
        if done.bundle_seal_sha256 is not None:
            seal.check(bundle, done.bundle_seal_sha256, "bundle")
        elif os.path.lexists(bundle):
            raise refuse(
                "seal_mismatch",
                "The staged runtime holds a bundle it was not sealed with: it will not run; "
                "recover it explicitly.",
            )
        return done

    def intent(self, runtime_digest: str) -> StagingIntent:
        """What a generation was staged from (its signed identity and permissions)."""
        path = self.generation(runtime_digest) / "intent.json"
        return msgspec.json.decode(path.read_bytes(), type=StagingIntent)

    def launcher(self, runtime_digest: str, kind: Kind) -> Launcher:
        """The one source of the ``kind`` launcher, after the seals are checked: the
        bundle's shim or the entry a sealed wheel declares (both refused, neither
        ``not_found``). Nothing the caller supplies names a path or a module."""
        done = self.completion(runtime_digest)
        generation = self.generation(runtime_digest)
        sites = sorted((generation / "runtime").glob("lib/python*/site-packages"))
        if len(sites) != 1:
            raise refuse("recovery_required", "The staged runtime has no single site-packages.")
        declared = declared_entries(sites[0], kind)
        if kind in done.bundle_shims:
            if declared:
                raise _both(kind)
            return Launcher(entry=shim_entry(kind), site=sites[0], bundle=generation / BUNDLE_DIR)
        return Launcher(entry=single_entry(declared, kind), site=sites[0], bundle=None)

    def owner_command(self, runtime_digest: str) -> list[str]:
        """argv that starts the owner in the generation's own interpreter: only after the
        seals are checked, never writing bytecode, isolated from the user site and the
        environment."""
        launcher = self.launcher(runtime_digest, "owner")
        module, _, function = launcher.entry.partition(":")
        python = self.generation(runtime_digest) / "runtime" / "bin" / "python"
        if launcher.bundle is None:
            code = f"import importlib; importlib.import_module({module!r}).{function}()"
        else:
            code = f"{SHIM_LOADER}_load_shim({str(launcher.bundle)!r}, {module!r}).{function}()"
        return [str(python), "-I", "-B", "-c", code]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def shim_entry(kind: Kind) -> str:
    """The fixed entry of an archive shim: ``__owner__:main`` and so on."""
    return f"{SHIMS[kind].removesuffix('.py')}:main"


def single_entry(declared: list[str], kind: Kind) -> str:
    """The one well-formed ``kind`` entry the sealed wheels declare."""
    if not declared:
        raise refuse(
            "not_found",
            f"The selected release declares no {kind} entry point under {RUNTIME_GROUP} "
            f"and its archive carries no {SHIMS[kind]}.",
        )
    if len(declared) > 1 or not ENTRY.match(declared[0]):
        raise refuse("unsafe_archive", f"The selected release declares its {kind} entry badly.")
    return declared[0]


def _both(kind: Kind) -> PluginRefusal:
    return refuse(
        "unsafe_archive",
        f"Both the bundle archive's {SHIMS[kind]} and a signed wheel's {kind} entry under "
        f"{RUNTIME_GROUP} declare the {kind} launcher: a release has exactly one.",
    )


def _owner_entry(facts: list[WheelFacts], bundle: BundleFacts | None) -> str:
    """Check that every launcher has at most one source, the owner exactly one; the
    owner's entry."""
    shims = () if bundle is None else bundle.shims
    owner = shim_entry("owner") if "owner" in shims else ""
    for kind in KINDS:
        declared = [f.runtime_entries[kind] for f in facts if kind in f.runtime_entries]
        if kind in shims:
            if declared:
                raise _both(kind)
        elif kind == "owner" and len(declared) != 1:
            raise refuse(
                "unsafe_archive",
                "Exactly one signed wheel must declare the owner under "
                f"{RUNTIME_GROUP}, or the bundle archive must carry {SHIMS['owner']}.",
            )
        elif declared:
            entry = single_entry(declared, kind)
            owner = entry if kind == "owner" else owner
    return owner


def _bound(log: Path) -> None:
    if log.stat().st_size > INSTALLER_OUTPUT_BYTES:
        with log.open("r+b") as handle:
            handle.truncate(INSTALLER_OUTPUT_BYTES)
