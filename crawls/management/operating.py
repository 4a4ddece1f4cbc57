"""`manage.py crawl log` and `crawl alerts`: a crawl's log and the alert rules, from the shell.

Subcommands of `crawl` (crawls/management/commands/crawl.py adds them with add_parsers and
takes their handlers from Operating), kept in a module of their own so that each stays short.
They read and change what the crawl's log page and the Alerts pages do, through the same
services (crawls.logs, crawls.alerts); a bad flag is a CommandError that names it.
"""

from __future__ import annotations

import json
import time
from argparse import ArgumentParser

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import CommandError

from crawlhub.dates import machine
from crawls import alerts
from crawls.logs import KIND_GROUPS, PAGE_SIZE, LogFilter, log_page, log_since
from crawls.models import AlertKind, AlertRule, Channel, Crawl, CrawlEvent

# How often `crawl log --follow` looks for new lines.
FOLLOW_SECONDS = 1.0
# The flag each field of a log filter or an alert rule comes from, for the messages.
LOG_FLAGS = {
    "level": "--level",
    "kind": "--kind",
    "host": "--host",
    "q": "--text",
    "before": "--before",
}
RULE_FLAGS = {
    "kind": "--kind",
    "percent": "--percent",
    "minutes": "--minutes",
    "emails": "--email",
    "crawl": "--crawl",
    "channel": "--channel",
}


def the_one_admin():
    """Whose a crawl or an alert rule made without --user is: the installation's admin (`up`
    creates one), when there is exactly one active superuser; else None."""
    admins = list(get_user_model().objects.filter(is_superuser=True, is_active=True)[:2])
    return admins[0] if len(admins) == 1 else None


def add_parsers(sub) -> None:
    """The `log` and `alerts` subcommands, on the subparsers of `crawl`."""
    log = sub.add_parser("log", help="the crawl's log: what its workers and users did")
    log.add_argument("id", type=int)
    log.add_argument(
        "--level", default="", help="the lowest level shown: info (all), warning or error"
    )
    log.add_argument(
        "--kind", default="", help=f"a group ({', '.join(KIND_GROUPS)}) or one kind of line"
    )
    log.add_argument("--host", default="", help="lines about hosts that contain this")
    log.add_argument("--text", default="", help="lines whose text contains this")
    log.add_argument("--size", type=int, default=PAGE_SIZE, help="lines shown (at most 200)")
    log.add_argument("--before", default="", help="older lines: the id a listing said")
    log.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then print new lines as they come, until the crawl ends",
    )
    log.add_argument("--json", action="store_true", help="one JSON object per line")

    rules = sub.add_parser("alerts", help="alert rules: list, add, remove")
    actions = rules.add_subparsers(dest="alerts_action", required=True, metavar="ALERTS_ACTION")
    listing = actions.add_parser("list", help="the rules, or those that watch a crawl or channel")
    _target(listing, required=False)
    listing.add_argument("--json", action="store_true")
    add = actions.add_parser("add", help="a rule on a crawl or on every crawl of a channel")
    _target(add, required=True)
    add.add_argument(
        "--kind",
        required=True,
        help=", ".join(f"{value} ({label})" for value, label in AlertKind.choices),
    )
    add.add_argument("--percent", help="N of an error rate over N%%: 1 to 100")
    add.add_argument(
        "--minutes", help=f"M of an error rate or no progress: 1 to {alerts.MAX_MINUTES}"
    )
    add.add_argument("--email", action="append", default=[], help="an address told (repeat)")
    add.add_argument("--user", help="who adds it; default: the one admin, if there is exactly one")
    remove = actions.add_parser("remove", help="remove a rule (its alerts stay in the history)")
    remove.add_argument("rule", type=int, help="the rule's id, as `crawl alerts list` shows it")


def _target(parser: ArgumentParser, *, required: bool) -> None:
    target = parser.add_mutually_exclusive_group(required=required)
    target.add_argument("--crawl", type=int, help="a crawl's id")
    target.add_argument("--channel", help="a channel's slug")


def _flagged(exc: ValidationError, flags: dict[str, str]) -> list[str]:
    """Each message of `exc` after the flag its field came from."""
    return [
        f"{flags.get(field, field)}: {message}"
        for field, messages in exc.message_dict.items()
        for message in messages
    ]


class Operating:
    """The handlers of `crawl log` and `crawl alerts`, mixed into the `crawl` command (which
    has _crawl, _user and the output streams)."""

    # -- the log -------------------------------------------------------------------------------

    def do_log(self, *, id, level, kind, host, text, size, before, follow, json, **_) -> None:
        crawl = self._crawl(id)
        if not 1 <= size <= 200:
            raise CommandError(f"--size: from 1 to 200 lines, not {size}")
        try:
            flt = LogFilter.from_params({"level": level, "kind": kind, "host": host, "q": text})
            found = log_page(crawl, flt, before=before, size=size)
        except ValidationError as exc:
            raise CommandError("\n".join(_flagged(exc, LOG_FLAGS))) from None
        if found.older and not follow:
            self.stdout.write(
                f"older lines: crawl log {id} --before {found.older}" + _filter_flags(flt)
            )
        lines = list(reversed(found.lines))  # oldest first, as a terminal reads on
        for line in lines:
            self._write_line(line, as_json=json)
        if follow:
            self._follow(crawl, flt, after=found.lines[0].pk if found.lines else 0, as_json=json)

    def _follow(self, crawl: Crawl, flt: LogFilter, *, after: int, as_json: bool) -> None:
        """New lines as they come; once the crawl is over, what its slices still wrote then."""
        over_seen = 0
        while over_seen < 2:
            # Read the state before the lines: a line written before the crawl ended is read.
            crawl.refresh_from_db(fields=["state"])
            over_seen += crawl.is_over()
            lines = log_since(crawl, flt, after=after)
            for line in lines:
                self._write_line(line, as_json=as_json)
                after = line.pk
            if lines:
                self.stdout.flush()
            if len(lines) < 200 and over_seen < 2:
                time.sleep(FOLLOW_SECONDS)

    def _write_line(self, line: CrawlEvent, *, as_json: bool) -> None:
        who = line.user.get_username() if line.user_id else None
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "id": line.pk,
                        "at": machine(line.at),
                        "kind": line.kind,
                        "level": line.level,
                        "host": line.host,
                        "text": line.detail,
                        "user": who,
                    }
                )
            )
            return
        about = f"{line.host}  " if line.host else ""
        by = f" (by {who})" if who else ""
        self.stdout.write(
            f"{line.pk:>7}  {line.at:%Y-%m-%d %H:%M:%S}  {line.level:<7}  "
            f"{line.get_kind_display():<16}  {about}{line.detail}{by}"
        )

    # -- alert rules -----------------------------------------------------------------------------

    def do_alerts(self, *, alerts_action: str, **options) -> None:
        getattr(self, f"_alerts_{alerts_action}")(**options)

    def _alerts_list(self, *, crawl, channel, json, **_) -> None:
        if crawl is not None:
            rules = alerts.rules_for(self._crawl(crawl))
        elif channel is not None:
            rules = AlertRule.objects.filter(channel=self._channel(channel))
        else:
            rules = AlertRule.objects.all()
        rules = rules.select_related("channel", "crawl").order_by("id")
        rows = [
            {
                "id": rule.pk,
                "crawl": rule.crawl_id,
                "channel": rule.channel.slug if rule.channel else None,
                "kind": rule.kind,
                "percent": rule.percent,
                "minutes": rule.minutes,
                "emails": rule.emails,
                "active": rule.active,
                "condition": rule.condition,
            }
            for rule in rules
        ]
        if json:
            self.stdout.write(_json(rows))
            return
        if not rows:
            self.stdout.write("no alert rules")
        for row in rows:
            target = f"crawl {row['crawl']}" if row["crawl"] else f"channel {row['channel']}"
            told = ", ".join(row["emails"]) or "webhooks only"
            state = "" if row["active"] else "  (off)"
            self.stdout.write(f"{row['id']:>5}  {target:<20} {row['condition']}  -> {told}{state}")

    def _alerts_add(self, *, crawl, channel, kind, percent, minutes, email, user, **_) -> None:
        creator = self._user(user) if user else the_one_admin()
        if creator is None:
            raise CommandError("--user: name who adds the rule (there is not exactly one admin)")
        try:
            rule = alerts.rule_create(
                user=creator,
                kind=kind.strip(),
                percent=percent,
                minutes=minutes,
                emails=email,
                crawl=self._crawl(crawl) if crawl is not None else None,
                channel=self._channel(channel) if channel is not None else None,
            )
        except ValidationError as exc:
            lines = _flagged(exc, RULE_FLAGS)
            raise CommandError("invalid alert rule:\n  " + "\n  ".join(lines)) from None
        except PermissionDenied as exc:
            raise CommandError(f"--user {creator.get_username()}: {exc}") from None
        self.stdout.write(f"alert rule {rule.pk}: {rule.condition} on {rule.target}")

    def _alerts_remove(self, *, rule, **_) -> None:
        found = AlertRule.objects.select_related("channel", "crawl").filter(pk=rule).first()
        if found is None:
            raise CommandError(f"no alert rule with id {rule} (crawl alerts list shows them)")
        alerts.rule_delete(rule=found)
        self.stdout.write(f"alert rule {rule} removed: {found.condition} on {found.target}")

    def _channel(self, slug: str) -> Channel:
        try:
            return Channel.objects.get(slug=slug)
        except Channel.DoesNotExist:
            raise CommandError(f"--channel: no channel with slug {slug!r}") from None


def _filter_flags(flt: LogFilter) -> str:
    return "".join(f" {LOG_FLAGS[name]} {value!r}" for name, value in flt.params().items())


def _json(value) -> str:
    return json.dumps(value, indent=2)
