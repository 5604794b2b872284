"""`skulk registry ...`: publish a signed model registry of your own, and read a node's.

``publish`` turns a directory of card files into a TUF repository any static HTTP
server can serve (``skulk_core.registry.publish`` builds and signs it; this module
only reads the cards and keys and writes the files, each via temp + rename, the
timestamp last). ``status`` reads ``GET /v1/registry/status``.
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.table import Table

from skulk_cli import console
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.private_files import write_new_private
from skulk_core.models.advisories import Advisory
from skulk_core.models.cards import ModelCard
from skulk_core.registry.format import (
    CatalogRejectedError,
    Provenance,
    encode_catalog,
    parse_catalog,
)

if TYPE_CHECKING:
    from skulk_core.registry.publish import RoleKeys

# NOTE: publishing (TUF, securesystemslib, cryptography: about half a second of
# imports) is imported where it runs, so every other `skulk` command, `--help`
# included, starts without it.

app = typer.Typer(
    help="Publish a signed (TUF) model registry from card files; show a node's registry.",
    no_args_is_help=True,
)

ADVISORIES_FILE = "advisories.json"
MAX_CARD_FILE_BYTES = 1024 * 1024


class _CardFile(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The ``POST /models/add-card`` body shape, also accepted as a card file."""

    model_card: ModelCard


def read_cards(cards_dir: Path) -> tuple[list[ModelCard], list[Advisory]]:
    """Every ``*.json`` card in ``cards_dir`` (a bare card or ``{"modelCard": ...}``),
    and ``advisories.json`` when present."""
    from skulk_core.registry.publish import PublishError  # noqa: PLC0415  (see the NOTE above)

    if not cards_dir.is_dir():
        raise PublishError(f"{cards_dir} is not a directory of card files")
    cards: list[ModelCard] = []
    advisories: list[Advisory] = []
    for path in sorted(cards_dir.glob("*.json")):
        raw = path.read_bytes()
        if len(raw) > MAX_CARD_FILE_BYTES:
            raise PublishError(f"{path.name} is larger than {MAX_CARD_FILE_BYTES} bytes")
        try:
            if path.name == ADVISORIES_FILE:
                advisories = msgspec.json.decode(raw, type=list[Advisory])
            elif b'"modelCard"' in raw:
                cards.append(msgspec.json.decode(raw, type=_CardFile).model_card)
            else:
                cards.append(msgspec.json.decode(raw, type=ModelCard))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise PublishError(f"{path.name}: {exc}") from None
    if not cards:
        raise PublishError(f"{cards_dir} holds no *.json card files")
    return cards, advisories


def keys_for(keys_dir: Path) -> tuple[RoleKeys, bool]:
    """The role keys in ``keys_dir`` (``<role>.pem``), generated there when it has none.
    Answers whether they were generated."""
    from skulk_core.registry.publish import (  # noqa: PLC0415  (see the NOTE above)
        ROLES,
        PublishError,
        generate_keys,
        load_keys,
    )

    paths = {role: keys_dir / f"{role}.pem" for role in ROLES}
    present = [role for role, path in paths.items() if path.exists()]
    if present and len(present) < len(ROLES):
        missing = sorted(set(ROLES) - set(present))
        raise PublishError(f"{keys_dir} lacks {', '.join(f'{r}.pem' for r in missing)}")
    if present:
        return load_keys({role: path.read_bytes() for role, path in paths.items()}), False
    keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    keys, pems = generate_keys()
    for role, path in paths.items():
        write_new_private(path, pems[role])
    return keys, True


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_repository(repo_dir: Path, files: dict[str, bytes]) -> None:
    """Targets first, then versioned metadata, the roots, and ``timestamp.json`` last: a
    client reading during the publish sees the old repository or the new one."""

    def order(relative: str) -> int:
        if relative.startswith("targets/"):
            return 0
        if relative == "metadata/timestamp.json":
            return 3
        return 2 if relative.endswith("root.json") else 1

    for relative in sorted(files, key=order):
        _write(repo_dir / relative, files[relative])


def publish_repository(
    cards_dir: Path,
    repo_dir: Path,
    keys_dir: Path,
    *,
    provenance: Provenance,
    expires_days: int,
    now: datetime,
) -> dict[str, Any]:
    """Publish ``cards_dir`` into ``repo_dir``; what was published, as JSON builtins."""
    from skulk_core.registry.publish import (  # noqa: PLC0415  (see the NOTE above)
        Lifetimes,
        PublishError,
        build_repository,
        check_root,
        published_version,
    )

    repo, keys_at = repo_dir.resolve(), keys_dir.resolve()
    if keys_at == repo or repo in keys_at.parents:
        raise PublishError("the keys directory must not be inside the published repository")
    cards, advisories = read_cards(cards_dir)
    try:
        catalog = encode_catalog([(card, provenance) for card in cards], advisories)
    except CatalogRejectedError as exc:
        raise PublishError(str(exc)) from None
    keys, generated = keys_for(keys_dir)
    root_path = repo_dir / "metadata" / "root.json"
    root = root_path.read_bytes() if root_path.exists() else None
    version = 1
    if root is not None:
        check_root(root, keys)
        timestamp = repo_dir / "metadata" / "timestamp.json"
        if timestamp.exists():
            version = published_version(timestamp.read_bytes()) + 1
    lifetime = timedelta(days=expires_days)
    files = build_repository(
        catalog,
        keys,
        version=version,
        now=now,
        root=root,
        lifetimes=Lifetimes(targets=lifetime, snapshot=lifetime, timestamp=lifetime),
    )
    write_repository(repo_dir, files)
    verified = parse_catalog(catalog)
    return {
        "repository": str(repo_dir),
        "root": str(root_path),
        "keys": str(keys_dir),
        "keys_generated": generated,
        "version": version,
        "snapshot_id": verified.snapshot_id,
        "expires": (now + lifetime).astimezone(UTC).isoformat(),
        "cards": [
            {"model_id": card.model_id, "registry_card_id": card.registry_card_id}
            for card in verified.cards
        ],
        "advisories": [advisory.id for advisory in verified.advisories],
    }


@app.command("publish")
def publish(
    ctx: typer.Context,
    cards_dir: Annotated[
        Path,
        typer.Argument(
            metavar="CARDS_DIR",
            help="Card files (*.json, camelCase like `POST /models/add-card`), and an "
            "optional advisories.json.",
            show_default=False,
        ),
    ],
    *,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", metavar="REPO_DIR", help="The repository to create or update."
        ),
    ],
    keys_dir: Annotated[
        Path,
        typer.Option(
            "--keys",
            metavar="KEYS_DIR",
            help="Private role keys (root/targets/snapshot/timestamp.pem); generated here "
            "when absent. Keep them out of the published directory.",
        ),
    ] = Path("registry-keys"),
    provenance: Annotated[
        Provenance, typer.Option(help="The audited origin the cards are published with.")
    ] = Provenance.COMMUNITY,
    expires_days: Annotated[
        int,
        typer.Option(
            min=1,
            max=365,
            help="Days until the targets, snapshot and timestamp expire; publish again "
            "before then or nodes refuse the frozen repository.",
        ),
    ] = 30,
    json_output: JsonFlag = False,
) -> None:
    """Build and sign a TUF repository serving CARDS_DIR's cards as the registry catalog.

    Serve REPO_DIR with any static HTTP server, then on each node set `registry.url` to
    its URL and copy REPO_DIR/metadata/root.json to `registry.root` (or the node's
    data dir as registry/root.json). Publishing again bumps every version.
    """
    from skulk_core.registry.publish import PublishError  # noqa: PLC0415  (see the NOTE above)

    cli = CliContext.of(ctx)
    try:
        result = publish_repository(
            cards_dir,
            output,
            keys_dir,
            provenance=provenance,
            expires_days=expires_days,
            now=datetime.now(UTC),
        )
    except (PublishError, OSError) as exc:
        console.error(str(exc))
        raise typer.Exit(EXIT_REFUSED) from None
    if cli.wants_json(json_output):
        console.emit_json(result)
        return
    table = Table(title=f"Registry version {result['version']}: {result['snapshot_id']}")
    table.add_column("model")
    table.add_column("registry card id")
    for card in result["cards"]:
        table.add_row(str(card["model_id"]), str(card["registry_card_id"]))
    console.show(table)
    if result["keys_generated"]:
        console.note(f"New signing keys are in {result['keys']}; keep them private.")
    console.note(
        f"Trusted root for nodes (registry.root): {result['root']}; expires {result['expires']}."
    )


@app.command("status")
def status(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Where this node's signed catalog comes from: source, last refresh, snapshot id,
    verified age and the last refusal."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.registry_status()
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    table = Table(title="Registry", show_header=False)
    table.add_column("fact")
    table.add_column("value")
    refusal = answer.get("last_refusal")
    age = answer.get("verified_age_seconds")
    rows = [
        ("state", answer.get("state")),
        ("source", answer.get("source_url") or "not configured (registry.url)"),
        ("trusted root", answer.get("trusted_root")),
        ("snapshot", answer.get("snapshot_id")),
        ("cards", answer.get("card_count")),
        ("last refresh", answer.get("last_attempt_at")),
        ("last verified", answer.get("last_success_at")),
        ("verified age", None if age is None else f"{float(str(age)):.0f} s"),
        (
            "last refusal",
            f"{refusal.get('reason')}: {refusal.get('message')} ({refusal.get('at')})"
            if isinstance(refusal, dict)
            else None,
        ),
    ]
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    console.show(table)
