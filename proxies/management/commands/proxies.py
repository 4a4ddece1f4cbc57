"""python manage.py proxies import FILE|URL | list [--json] | remove ADDR... | validate [--all]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from crawlhub.dates import machine
from proxies import services, validation
from proxies.models import ProxyJob, ProxyState


class Command(BaseCommand):
    help = "Import, list, remove and validate proxies of the proxy pool."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, parser_class=CommandParser)
        imp = sub.add_parser("import", help="Import a list from a file, a URL, or - for stdin.")
        imp.add_argument("source", help="FILE, http(s)://URL or -")
        imp.add_argument("--now", action="store_true", help="Validate the new proxies now.")
        lst = sub.add_parser("list", help="List proxies (not removed ones unless --state).")
        lst.add_argument("--json", action="store_true", dest="as_json")
        lst.add_argument("--state", choices=ProxyState.values)
        lst.add_argument("--channel")
        lst.add_argument("--score", choices=list(services.SCORE_RANGES))
        lst.add_argument("--anonymity")
        lst.add_argument("--source")
        lst.add_argument("--sort", choices=list(services.SORTS), default="score")
        rem = sub.add_parser("remove", help="Remove proxies from every pool (audit-logged).")
        rem.add_argument("addresses", nargs="+", metavar="ADDR", help="host:port or URL")
        rem.add_argument("--why", default="", help="Reason for the audit log.")
        val = sub.add_parser("validate", help="Run a validation pass now.")
        val.add_argument("--all", action="store_true", help="Every proxy not removed, due or not.")
        val.add_argument(
            "--wait",
            type=float,
            default=120,
            help="Seconds to wait for a pass already running (default 120).",
        )

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, "do_" + action)(**options)

    def do_import(self, *, source: str, now: bool, **_) -> None:
        """In this process, in the batches a worker would use, saying how far it got."""
        try:
            if source.startswith(("http://", "https://")):
                report = services.import_from_url(url=source, actor="cli", progress=self.progress)
            else:
                path = Path(source)
                data = self.stdin_bytes() if source == "-" else self.read(path)
                label = "stdin" if source == "-" else f"file: {path.name}"
                report = services.import_proxies(
                    text=services.decode_list(data),
                    source=label,
                    actor="cli",
                    progress=self.progress,
                )
        except services.ImportFailed as exc:
            raise CommandError(str(exc)) from None
        for error in report.errors:
            self.stderr.write(f"line {error.line}: {error.reason}: {error.text}")
        for dup in report.duplicates:
            self.stderr.write(f"line {dup.line}: duplicate, {dup.why}: {dup.text}")
        self.stdout.write(
            f"{len(report.added)} added, {len(report.duplicates)} duplicates, "
            f"{len(report.errors)} bad lines"
        )
        if now and report.added:
            self.print_pass(validation.run_pass(proxy_ids=[p.pk for p in report.added], wait=120))

    def progress(self, job: ProxyJob) -> None:
        if (job.total or 0) > services.INLINE_LIMIT:  # a list of one batch needs no progress
            self.stdout.write(
                f"{job.done:,} of {job.total:,} proxies of the list stored: {job.changed:,} "
                f"added, {job.duplicates:,} duplicates, {job.errors:,} bad lines so far"
            )

    def read(self, path: Path) -> bytes:
        try:
            if path.stat().st_size > services.MAX_LIST_BYTES:
                raise CommandError(f"{path} is larger than 5 MB")
            return path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None

    def stdin_bytes(self) -> bytes:
        return sys.stdin.buffer.read(services.MAX_LIST_BYTES + 1)

    def do_list(self, *, as_json: bool, **filters) -> None:
        params = {
            k: v
            for k, v in filters.items()
            if k in ("state", "channel", "score", "anonymity", "source", "sort") and v
        }
        rows = [
            {
                "id": p.pk,
                "proxy": p.masked_url,
                "state": p.state,
                "score": p.score,
                "latency_ms": p.latency_ms,
                "anonymity": p.anonymity,
                "source": p.source,
                "successes": p.successes,
                "failures": p.failures,
                "last_error": p.last_error,
                "last_validated_at": machine(p.last_validated_at),
            }
            for p in services.filter_proxies(params)
        ]
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        for r in rows:
            latency = f"{r['latency_ms']} ms" if r["latency_ms"] is not None else "-"
            self.stdout.write(
                f"{r['proxy']:<45} {r['state']:<9} {r['score']:>6.2f} {latency:>9} "
                f"{r['anonymity'] or '-':<12} {r['source']}"
            )
        self.stdout.write(f"{len(rows)} proxies")

    def do_remove(self, *, addresses: list[str], why: str, **_) -> None:
        found, unknown = services.resolve(addresses=addresses)
        for address in unknown:
            self.stderr.write(f"unknown proxy: {address}")
        batch = services.INLINE_LIMIT  # one short transaction per batch
        for start in range(0, len(found), batch):
            done = services.remove_proxies(
                proxies=found[start : start + batch], why=why or "removed from the CLI", actor="cli"
            )
            for proxy in done:
                self.stdout.write(f"removed {proxy.masked_url}")
        if unknown:
            raise CommandError(f"{len(unknown)} of {len(addresses)} addresses are unknown")

    def do_validate(self, *, all: bool, wait: float, **_) -> None:
        self.print_pass(validation.run_pass(everything=all, wait=wait))

    def print_pass(self, report) -> None:
        if report is None:
            raise CommandError("another validation pass is running; try again later")
        failed = ", ".join(f"{k} {v}" for k, v in report.failed.items()) or "none"
        self.stdout.write(
            f"checked {report.checked}: {report.ok} ok, {report.admitted} admitted, "
            f"{report.removed} removed; failures: {failed}"
        )
