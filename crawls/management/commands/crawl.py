"""`manage.py crawl`: create, drive and watch crawls from the shell."""

from __future__ import annotations

import json
import time
from argparse import ArgumentParser, ArgumentTypeError
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from crawlhub.dates import machine
from crawls import exports, queued, services
from crawls.management.operating import Operating, add_parsers, the_one_admin
from crawls.management.option_flags import add_create_options, add_option, read_auth
from crawls.models import CRAWL_OPTIONS, Channel, Crawl, CrawlState


class Command(Operating, BaseCommand):
    help = (
        "Create, start, pause, resume, cancel, delete and watch crawls; read their logs; "
        "alert rules."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add_create_options(sub.add_parser("create", help="create a crawl; prints its id"))
        for action in ("start", "pause", "resume", "cancel"):
            sub.add_parser(action, help=f"{action} a crawl").add_argument("id", type=int)
        delete = sub.add_parser(
            "delete", help="delete a crawl, its pages and its Redis keys (cancelled first)"
        )
        delete.add_argument("id", type=int)
        delete.add_argument("--user", help="username recorded in the trail of deletions")
        seeds = sub.add_parser(
            "add-seeds",
            help="add start URLs, also to a running crawl (new origins do not get "
            "the saved credentials)",
        )
        seeds.add_argument("id", type=int)
        seeds.add_argument("urls", nargs="+")
        retry = sub.add_parser("retry-failed", help="requeue the failure queue")
        retry.add_argument("id", type=int)
        listing = sub.add_parser("list", help="list crawls")
        listing.add_argument("--state", choices=CrawlState.values)
        listing.add_argument("--json", action="store_true")
        status = sub.add_parser("status", help="state and every counter")
        status.add_argument("id", type=int)
        status.add_argument("--json", action="store_true")
        export = sub.add_parser("export", help="write the crawl's pages or responses to a file")
        export.add_argument("id", type=int)
        export.add_argument("--format", choices=list(exports.FORMATS), default="jsonl")
        export.add_argument("--output", required=True, help="file to write, or - for stdout")
        hosts = sub.add_parser("hosts", help="every host: queued, in flight, done, delay, held")
        hosts.add_argument("id", type=int)
        hosts.add_argument("--json", action="store_true")
        for name, text in (
            ("hold-host", "ask a host nothing until a time; what is being fetched finishes"),
            ("release-host", "end a host's hold"),
            ("drop-host", "drop a host's queued requests and retries (counted as cancelled)"),
        ):
            host_parser = sub.add_parser(name, help=text)
            host_parser.add_argument("id", type=int)
            host_parser.add_argument("host", help="hostname[:port], as `crawl hosts` lists it")
            host_parser.add_argument("--user", help="username recorded in the crawl's events")
            if name == "hold-host":
                host_parser.add_argument(
                    "--until",
                    required=True,
                    type=_until,
                    help="how long (90s, 30m, 2h, 1d; a bare number is minutes) or until when "
                    "(ISO 8601, UTC unless it says otherwise, e.g. 2030-01-31T18:00)",
                )
        change = sub.add_parser(
            "change", help="change a running or paused crawl's limits or scope (as Change limits)"
        )
        change.add_argument("id", type=int)
        for name in services.LIVE_FIELDS:
            if name not in services.SCOPE_FIELDS:
                add_option(change, Crawl._meta.get_field(name))
        for kind in ("include", "exclude"):
            change.add_argument(
                f"--add-{kind}",
                action="append",
                default=[],
                metavar="PATTERN",
                help=f"one more {kind} pattern (repeat)",
            )
            change.add_argument(
                f"--remove-{kind}",
                action="append",
                default=[],
                metavar="PATTERN",
                help=f"an {kind} pattern to remove, as `crawl status` shows it (repeat)",
            )
        change.add_argument("--user", help="username recorded in the crawl's events")
        queue = sub.add_parser("queue", help="what is queued: by host, by depth, and requests")
        queue.add_argument("id", type=int)
        queue.add_argument(
            "--size",
            type=int,
            choices=queued.PAGE_SIZES,
            default=queued.DEFAULT_SIZE,
            help="requests to list",
        )
        queue.add_argument("--after", default="", help="the cursor a listing ended with")
        queue.add_argument("--json", action="store_true")
        waiting = sub.add_parser("wait", help="wait until the crawl ends (exit 0 if finished)")
        waiting.add_argument("id", type=int)
        waiting.add_argument("--timeout", type=float, default=0, help="seconds; 0 = forever")
        add_parsers(sub)  # log, alerts

    def handle(self, *args, action: str, **options) -> None:
        handler = getattr(self, "do_" + action.replace("-", "_"))
        try:
            handler(**options)
        except ValidationError as exc:
            lines = [
                # Some messages already start with their field ("include_patterns: line 1: ...").
                msg if msg.startswith(f"{field}: ") else f"{field}: {msg}"
                for field, msgs in exc.message_dict.items()
                for msg in msgs
            ]
            raise CommandError("invalid crawl:\n  " + "\n  ".join(lines)) from None
        except services.CrawlActionError as exc:
            raise CommandError(str(exc)) from None

    def _crawl(self, crawl_id: int) -> Crawl:
        try:
            return Crawl.objects.select_related("channel").get(pk=crawl_id)
        except Crawl.DoesNotExist:
            raise CommandError(f"no crawl with id {crawl_id}") from None

    def _user(self, username: str | None):
        if not username:
            return None
        try:
            return get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None

    def do_create(
        self, *, name, seed, channel, user, start, auth_file, cookies_file, **options
    ) -> None:
        try:
            channel_obj = Channel.objects.get(slug=channel)
        except Channel.DoesNotExist:
            if channel != "default":
                raise CommandError(f"no channel with slug {channel!r}") from None
            channel_obj = Channel.default()
        fields = {k: v for k, v in options.items() if k in CRAWL_OPTIONS and v is not None}
        creator = self._user(user) if user else the_one_admin()
        auth = read_auth(auth_file, cookies_file)
        crawl = services.crawl_create(
            user=creator, name=name, seeds=seed, channel=channel_obj, auth=auth, **fields
        )
        if creator is None:
            self.stderr.write(
                f"crawl {crawl.pk} has no owner (no --user, and not exactly one admin): only "
                "staff see it; name the crawl's owner with --user"
            )
        if start:
            services.crawl_start(crawl=crawl, user=creator)
        self.stdout.write(str(crawl.pk))

    def do_start(self, *, id, **_) -> None:
        services.crawl_start(crawl=self._crawl(id))
        self.stdout.write(f"crawl {id} started")

    def do_pause(self, *, id, **_) -> None:
        services.crawl_pause(crawl=self._crawl(id))
        self.stdout.write(f"crawl {id} pausing")

    def do_resume(self, *, id, **_) -> None:
        services.crawl_resume(crawl=self._crawl(id))
        self.stdout.write(f"crawl {id} resumed")

    def do_cancel(self, *, id, **_) -> None:
        services.crawl_cancel(crawl=self._crawl(id))
        self.stdout.write(f"crawl {id} cancelled")

    def do_delete(self, *, id, user, **_) -> None:
        record = services.crawl_delete(crawl=self._crawl(id), user=self._user(user))
        self.stdout.write(f"crawl {id} deleted, with its {record.pages:,} page(s)")

    def do_add_seeds(self, *, id, urls, **_) -> None:
        crawl = self._crawl(id)
        added, seen = services.crawl_add_seeds(crawl=crawl, urls=urls)
        self.stdout.write(f"{added} added, {seen} already seen")
        if left_out := services.credentials_left_out(crawl):
            self.stdout.write(
                f"the saved credentials are not sent to {', '.join(left_out)}: they stay bound "
                "to the origins they were entered for, unless the crawl's owner enters them again"
            )

    def do_retry_failed(self, *, id, **_) -> None:
        count = services.crawl_retry_failed(crawl=self._crawl(id))
        self.stdout.write(f"{count} request(s) back in the queue")

    def do_hosts(self, *, id, json: bool, **_) -> None:
        rows = services.crawl_hosts(self._crawl(id))
        if json:
            self.stdout.write(_json(rows))
            return
        self.stdout.write(
            f"{'host':<32} {'queued':>7} {'flying':>6} {'done':>7} {'errors':>6} {'delay':>6}  "
            "held until / next allowed (UTC), why"
        )
        for row in rows:
            held, next_at = row["held_until"], row["next_at"]
            when = (
                f"held until {held:%Y-%m-%d %H:%M:%S}"
                if held
                else f"next {next_at:%H:%M:%S}"
                if next_at
                else ""
            )
            self.stdout.write(
                f"{row['host']:<32} {row['queued']:>7} {row['in_flight']:>6} {row['done']:>7} "
                f"{row['errors']:>6} {row['delay']:>6g}  "
                + "  ".join(filter(None, (when, row["why"])))
            )

    def do_hold_host(self, *, id, host, until, user, **_) -> None:
        minutes = (
            until if isinstance(until, float) else ((until - timezone.now()).total_seconds() / 60)
        )
        held = services.crawl_host_hold(
            crawl=self._crawl(id), host=host, minutes=minutes, user=self._user(user)
        )
        self.stdout.write(f"{host.strip().lower()} held until {held:%Y-%m-%d %H:%M:%S} UTC")

    def do_release_host(self, *, id, host, user, **_) -> None:
        services.crawl_host_release(crawl=self._crawl(id), host=host, user=self._user(user))
        self.stdout.write(f"{host.strip().lower()} released")

    def do_drop_host(self, *, id, host, user, **_) -> None:
        dropped = services.crawl_host_drop(crawl=self._crawl(id), host=host, user=self._user(user))
        self.stdout.write(f"{host.strip().lower()}: {dropped} queued request(s) dropped")

    def do_change(self, *, id, user, **options) -> None:
        crawl = self._crawl(id)
        changes = {k: v for k, v in options.items() if k in services.LIVE_FIELDS and v is not None}
        for kind in ("include", "exclude"):
            added, removed = options[f"add_{kind}"], options[f"remove_{kind}"]
            if not (added or removed):
                continue
            name = f"{kind}_patterns"
            current = list(getattr(crawl, name))
            if missing := [p for p in removed if p not in current]:
                raise CommandError(
                    f"--remove-{kind}: not one of the crawl's {kind} patterns: "
                    + ", ".join(map(repr, missing))
                    + f" (they are: {current or 'none'})"
                )
            changes[name] = [p for p in current if p not in removed] + [
                p for p in added if p not in current
            ]
        done = services.crawl_change_live(crawl=crawl, user=self._user(user), **changes)
        for line in done.lines or ["nothing changed"]:
            self.stdout.write(line)

    def do_queue(self, *, id, size: int, after: str, json: bool, **_) -> None:
        try:
            screen = queued.crawl_queue(self._crawl(id), after=after, size=size)
        except queued.CursorError as exc:
            raise CommandError(f"--after: {exc}") from None
        if json:
            self.stdout.write(
                _json(
                    {
                        "queued": screen.queued,
                        "retrying": screen.retrying,
                        "by_host": dict(screen.hosts),
                        "by_depth": dict(screen.depths),
                        "next": screen.next or None,
                        "results": screen.rows,
                    }
                )
            )
            return
        self.stdout.write(f"{screen.queued} queued, {screen.retrying} retrying")
        self.stdout.write(
            "by depth: " + (", ".join(f"{d}: {n}" for d, n in screen.depths) or "nothing queued")
        )
        self.stdout.write(
            "by host:  "
            + (", ".join(f"{h}: {n}" for h, n in screen.hosts[:20]) or "nothing queued")
        )
        for row in screen.rows:
            self.stdout.write(f"{row['depth']:>4} {row['priority']:>4}  {row['url']}")
        if screen.next:
            self.stdout.write(f"more: crawl queue {id} --after={screen.next}")

    def do_export(self, *, id, format: str, output: str, **_) -> None:
        crawl = self._crawl(id)
        exports.check(crawl, format)
        if output == "-":
            # Bytes, not text: the stream under Django's OutputWrapper.
            out = getattr(self.stdout._out, "buffer", self.stdout._out)
            for chunk in exports.iter_export(crawl, format):
                out.write(chunk)
            out.flush()
            return
        with open(output, "wb") as f:
            for chunk in exports.iter_export(crawl, format):
                f.write(chunk)
        self.stdout.write(f"crawl {id} exported as {format} to {output}")

    def do_list(self, *, state, json: bool, **_) -> None:
        crawls = Crawl.objects.select_related("channel").order_by("id")
        if state:
            crawls = crawls.filter(state=state)
        rows = [
            {"id": c.pk, "name": c.name, "state": c.state, "channel": c.channel.slug}
            for c in crawls
        ]
        if json:
            self.stdout.write(_json(rows))
            return
        for row in rows:
            self.stdout.write(
                f"{row['id']:>6}  {row['state']:<10} {row['channel']:<12} {row['name']}"
            )

    def _status(self, crawl: Crawl) -> dict:
        started, finished = crawl.started_at, crawl.finished_at
        # From its first start to its end (or to now), paused time included; None if unstarted.
        seconds = None
        if started is not None:
            seconds = round(((finished or timezone.now()) - started).total_seconds(), 3)
        return {
            "id": crawl.pk,
            "name": crawl.name,
            "state": crawl.state,
            "end_reason": crawl.end_reason,
            "end_line": crawl.end_line,
            "started_at": started,
            "finished_at": finished,
            "seconds": seconds,
            **services.crawl_stats(crawl),
        }

    def do_status(self, *, id, json: bool, **_) -> None:
        status = self._status(self._crawl(id))
        if json:
            self.stdout.write(_json(status))
            return
        for key, value in status.items():
            self.stdout.write(f"{key:>12}: {value}")

    def do_wait(self, *, id, timeout: float, **_) -> None:
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            crawl = self._crawl(id)
            if crawl.is_over():
                break
            if deadline and time.monotonic() > deadline:
                raise CommandError(f"crawl {id} is still {crawl.state} after {timeout:g} s")
            time.sleep(0.2)
        self.stdout.write(_json(self._status(crawl)))
        if crawl.state != CrawlState.FINISHED:
            raise CommandError(f"crawl {id} ended {crawl.state}: {crawl.end_line}")


_UNITS = {"s": 1 / 60, "m": 1.0, "h": 60.0, "d": 24 * 60.0}


def _until(text: str) -> float | datetime:
    """--until: a duration in minutes (float), or a time (an aware datetime, UTC if naive)."""
    text = text.strip()
    unit = _UNITS.get(text[-1:].lower()) if text else None
    try:
        return float(text[:-1] if unit else text) * (unit or 1.0)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ArgumentTypeError(
            f"{text[:40]!r} is neither a duration (90s, 30m, 2h, 1d) nor an ISO 8601 time"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _json(value) -> str:
    """JSON for the terminal: moments as the exports and the API write them (crawlhub.dates)."""
    return json.dumps(value, indent=2, sort_keys=False, default=_plain)


def _plain(value) -> str:
    return machine(value) if isinstance(value, datetime) else str(value)
