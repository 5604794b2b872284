"""The guided ``install-plugin``: an owner's interactive installation of a signed release.

Order, each step its own manager request under its fence: print the resume command;
for a new installation, ask its source first (HTTPS directory and metadata filename,
then that file read once to check the feed answers, then publisher id and Ed25519
key, a timezone-aware trust expiry, the trust confirmed separately, then the optional
feed bearer through hidden input) and only then register it and configure the
source, so a refusal or Ctrl-C before leaves nothing behind; a resumed installation
is registered first and asked the same when it has no source;
inspect the release (metadata only) and show its digest, size, expiry and
permissions; with a first consent, download and stage it; with a second, separate
consent (accepting the permissions), activate it. ``--from-catalog`` first reads the
signed catalog, picks the listing and, with consent, binds the installation's source
to it. A rerun with the same id reads retained state and never resubmits an effect:
a staged release is not downloaded again, an interrupted download is recovered only
with explicit consent, a pending lifecycle operation is only observed.

The bearer goes from hidden input to the manager's write-only ``token`` field and
nowhere else: not into output, an error, an operation id or the resume command.
"""

from __future__ import annotations

import datetime as dt
import getpass
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec
from rich.console import Console
from rich.prompt import Confirm, Prompt
from rich.table import Table

from skulk_cli.plugin_service.feed_probe import FeedUnreachable, Probe
from skulk_host.plugin_manager.protocol import SourceUpdate

POLL_SECONDS: Final = 0.2
POLL_LIMIT_SECONDS: Final = 300.0
"""Bounded polling: after this the command exits and the manager keeps working."""

Call = Callable[[dict[str, Any]], Any]
"""One manager request → its ``result``; a refusal raises :class:`Refused`."""


def _facts(title: str) -> Table:
    """A two-column table of facts; values fold rather than truncate (a digest is
    reviewed whole)."""
    table = Table(title=title, show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    return table


class Refused(Exception):
    """A manager refusal (its sentence) or the owner's decline; the command exits 1."""


class Installer:
    def __init__(self, console: Console, call: Call, probe: Probe | None = None) -> None:
        self.console = console
        self.call = call
        self.probe = probe

    # -- prompts -------------------------------------------------------------------

    def ask(self, question: str, default: str | None = None) -> str:
        if default is None:
            return Prompt.ask(question, console=self.console).strip()
        return Prompt.ask(question, console=self.console, default=default).strip()

    def confirm(self, question: str) -> bool:
        return Confirm.ask(question, console=self.console, default=False)

    def secret(self, question: str) -> str:
        # NOTE: getpass reads from the terminal with echo off; nothing is printed back.
        return getpass.getpass(f"{question}: ")

    # -- the flow ------------------------------------------------------------------

    def run(
        self,
        plugin_id: str | None,
        *,
        from_catalog: str | None = None,
        sequence: int | None = None,
        platform: str | None = None,
    ) -> str:
        fresh = plugin_id is None and from_catalog is None
        if plugin_id is None:
            plugin_id = f"managed.plugin-{secrets.token_hex(4)}"
        self.console.print(
            f"If this is interrupted, resume with: skulk-plugin-service install-plugin {plugin_id}",
            markup=False,
        )
        if fresh:
            # NOTE: a new installation is registered only once its source is known (the
            # feed answered, the publisher trusted): a refusal or Ctrl-C before that
            # leaves nothing behind.
            self.console.print(f"[bold]{plugin_id}[/bold] needs a release source.")
            update = self.ask_source()
            self.call({"action": "register", "plugin_id": plugin_id})
            self.save_source(plugin_id, update)
        else:
            self.call({"action": "register", "plugin_id": plugin_id})
        review: dict[str, Any] | None = None
        if from_catalog is not None:
            review = self.bind_catalog(plugin_id, from_catalog, sequence, platform)
        source = self.call({"action": "source_status", "plugin_id": plugin_id})
        if not source["configured"]:
            self.console.print(f"[bold]{plugin_id}[/bold] has no release source yet.")
            self.save_source(plugin_id, self.ask_source())
        if review is None:
            review = self.call({"action": "inspect_release", "plugin_id": plugin_id})
        self.show_review(review)
        self.stage(plugin_id, review)
        self.activate(plugin_id, review)
        return plugin_id

    def bind_catalog(
        self, plugin_id: str, bundle_id: str, sequence: int | None, platform: str | None
    ) -> dict[str, Any]:
        catalog = self.call({"action": "read_catalog"})
        listings = [
            e
            for e in catalog["entries"]
            if e["bundle_id"] == bundle_id
            and (sequence is None or e["sequence"] == sequence)
            and (platform is None or e.get("runtime_platform") == platform)
            and e.get("matches_host", True)
        ]
        if not listings:
            raise Refused(f"The catalog lists no release of {bundle_id} that fits this host.")
        newest = max(e["sequence"] for e in listings)
        chosen = [e for e in listings if e["sequence"] == newest]
        if len(chosen) > 1:
            raise Refused("Two artifacts are listed at that sequence: name one with --platform.")
        listing = chosen[0]
        table = _facts(f"Catalog listing from {catalog['publisher']}")
        for key in ("bundle_id", "title", "bundle_version", "sequence", "release_digest"):
            table.add_row(key, str(listing.get(key)))
        table.add_row("size", f"{listing.get('transfer_bytes', listing['artifact_bytes'])} bytes")
        table.add_row("permissions", ", ".join(listing.get("permissions") or []) or "none")
        self.console.print(table)
        if not self.confirm("Bind an installation to this listing's feed and publisher?"):
            raise Refused("Nothing was bound: the catalog listing was not accepted.")
        request: dict[str, Any] = {
            "action": "install_from_catalog",
            "catalog_sha256": catalog["catalog_sha256"],
            "bundle_id": bundle_id,
            "sequence": listing["sequence"],
            "plugin_id": plugin_id,
        }
        if listing.get("runtime_platform"):
            request["runtime_platform"] = listing["runtime_platform"]
        bound = self.call(request)
        if bound["review"]["runtime_digest"] != listing["release_digest"]:
            raise Refused("The feed's release record is not the one the catalog lists.")
        return dict(bound["review"])

    def ask_source(self) -> SourceUpdate:
        """The source update from the owner's answers; the feed is read (``probe``)
        right after its address, before any question about trust."""
        base_url = self.ask("HTTPS release directory (ending in /)")
        filename = self.ask("Metadata filename", default="release.json")
        if self.probe is not None:
            try:
                self.probe(base_url, filename)
            except FeedUnreachable as unreachable:
                raise Refused(f"{unreachable} Nothing was installed.") from None
            self.console.print(f"The release directory answers ({filename}).", markup=False)
        publisher = self.ask("Publisher id")
        key = self.ask("Publisher Ed25519 public key (64 hex characters)").lower()
        expiry = self.ask("Trust expiry (ISO 8601 with a timezone, e.g. 2027-01-01T00:00Z)")
        try:
            expires = dt.datetime.fromisoformat(expiry.replace("Z", "+00:00"))
        except ValueError:
            raise Refused("The trust expiry is not an ISO 8601 date and time.") from None
        if expires.tzinfo is None:
            raise Refused("The trust expiry needs a timezone (for example Z or +01:00).")
        self.console.print(
            f"Trust publisher [bold]{publisher}[/bold] with key [bold]{key}[/bold] for "
            f"releases from {base_url} until {expires.isoformat()}."
        )
        if not self.confirm("Trust this publisher for this installation?"):
            raise Refused("The publisher was not trusted: nothing was configured.")
        token = self.secret("Feed bearer token (input hidden; empty for none)")
        trust = {
            "revision": 1,
            "expires_at": int(expires.timestamp()),
            "publishers": {publisher: key},
            "revoked_publishers": [],
            "revoked_artifacts": [],
        }
        return SourceUpdate(
            expected_revision=0,
            base_url=base_url,
            metadata_filename=filename,
            trust=trust,
            token=token or None,
        )

    def save_source(self, plugin_id: str, update: SourceUpdate) -> None:
        request = msgspec.structs.asdict(update)
        self.call({"action": "configure_source", "plugin_id": plugin_id, "request": request})
        self.console.print("Release source configured.")

    def show_review(self, review: dict[str, Any]) -> None:
        table = _facts("Verified release")
        expires = dt.datetime.fromtimestamp(int(review["expires_at"]), dt.UTC)
        rows = [
            ("publisher", review.get("publisher")),
            ("bundle", f"{review.get('bundle_id')} {review.get('version')}"),
            ("sequence", review.get("sequence")),
            ("digest", review.get("runtime_digest")),
            ("size", f"{review.get('artifact_bytes')} bytes"),
            ("expires", expires.isoformat()),
            ("platform", review.get("platform")),
            ("permissions", ", ".join(review.get("permissions") or []) or "none"),
        ]
        for key, value in rows:
            table.add_row(key, str(value))
        self.console.print(table)

    def stage(self, plugin_id: str, review: dict[str, Any]) -> None:
        digest = review["runtime_digest"]
        operation = self.call({"action": "install_status", "plugin_id": plugin_id})["operation"]
        if operation is not None and operation["request"]["runtime_digest"] == digest:
            match operation["state"]:
                case "staged":
                    self.console.print("This release is already staged.")
                    return
                case "recovery_required":
                    self.console.print(
                        f"The download {operation['operation_id']} was interrupted "
                        f"({operation.get('error_code')})."
                    )
                    if not self.confirm("Retry that download (the same operation)?"):
                        raise Refused("The interrupted download was left for later recovery.")
                    source = self.call({"action": "source_status", "plugin_id": plugin_id})
                    self.call(
                        {
                            "action": "recover_install",
                            "plugin_id": plugin_id,
                            "operation_id": operation["operation_id"],
                            "expected_source_revision": source["revision"],
                        }
                    )
                case _:
                    self.console.print(f"The download is {operation['state']}; waiting.")
        else:
            size = review["artifact_bytes"]
            if not self.confirm(f"Download and stage this release ({size} bytes)?"):
                raise Refused("Nothing was downloaded.")
            self.call(
                {
                    "action": "install",
                    "plugin_id": plugin_id,
                    "request": {
                        "operation_id": secrets.token_hex(16),
                        "runtime_digest": digest,
                        "expected_source_revision": review["source_revision"],
                    },
                }
            )
        done = self.poll(
            lambda: self.call({"action": "install_status", "plugin_id": plugin_id})["operation"],
            ("staged", "recovery_required"),
        )
        if done["state"] != "staged":
            raise Refused(
                f"The download did not finish ({done.get('error_code')}); rerun the resume "
                "command to retry it."
            )
        self.console.print("Release staged.")

    def activate(self, plugin_id: str, review: dict[str, Any]) -> None:
        digest = review["runtime_digest"]
        observed = self.call({"action": "get", "plugin_id": plugin_id})
        if observed["selected_digest"] == digest and observed["enabled"]:
            self.console.print(f"{plugin_id} already runs this release.")
            return
        if observed["operation_state"] in ("accepted", "applying"):
            operation_id = observed["operation_id"]
            self.console.print(f"Operation {operation_id} is pending; waiting for it.")
        else:
            permissions = ", ".join(review.get("permissions") or []) or "none"
            self.console.print(f"Starting the plugin owner grants it: {permissions}.")
            if not self.confirm("Accept these permissions and start the plugin owner?"):
                raise Refused("The release is staged but not activated.")
            operation_id = secrets.token_hex(16)
            self.call(
                {
                    "action": "submit",
                    "plugin_id": plugin_id,
                    "request": {
                        "operation_id": operation_id,
                        "action": "activate",
                        "expected_revision": observed["selection_revision"],
                        "runtime_digest": digest,
                        "accept_permissions": True,
                    },
                }
            )
        done = self.poll(
            lambda: self.call(
                {"action": "operation", "plugin_id": plugin_id, "operation_id": operation_id}
            ),
            ("complete", "failed", "recovery_required", "superseded"),
        )
        if done["state"] != "complete":
            raise Refused(f"Activation ended {done['state']} ({done.get('error_code')}).")
        self.console.print(f"{plugin_id} is activated.")

    def poll(self, read: Callable[[], Any], until: tuple[str, ...]) -> dict[str, Any]:
        deadline = time.monotonic() + POLL_LIMIT_SECONDS
        while True:
            current = read()
            if current is not None and current["state"] in until:
                return dict(current)
            if time.monotonic() > deadline:
                raise Refused("Still in progress: the manager keeps working; rerun to observe.")
            time.sleep(POLL_SECONDS)
