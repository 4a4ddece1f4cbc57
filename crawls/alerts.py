"""Alert rules: a condition watched on one crawl or on every crawl of a channel, and who is told
(e-mail addresses, and the webhooks that want the "alert" event). Making, changing and reading
them, for every door; crawls/alert_checks.py evaluates them.

Permissions are the webhooks': a crawl's rules are its owner's (and staff's), a channel's are
staff's; everyone sees the channel rules that watch their crawls.
"""

from __future__ import annotations

import re

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_email
from django.db.models import Q, QuerySet

from crawls.models import Alert, AlertKind, AlertRule, Channel, Crawl
from crawls.services import visible_crawls

# The longest window: a day. Samples are kept this long (and a little more) per crawl.
MAX_MINUTES = 24 * 60
MAX_EMAILS = 20
# The kinds whose condition has N (percent) and M (minutes).
WITH_PERCENT = (AlertKind.ERROR_RATE,)
WITH_MINUTES = (AlertKind.ERROR_RATE, AlertKind.NO_PROGRESS)


def _clean_kind(kind: str) -> str:
    if kind not in AlertKind.values:
        raise ValidationError({"kind": [f"Choose one of: {', '.join(AlertKind.values)}."]})
    return kind


def _clean_number(field: str, value, *, low: int, high: int, name: str) -> int:
    """A whole number from low to high: an int, or its digits as a form sends them."""
    if isinstance(value, str):
        value = value.strip()
        if re.fullmatch(r"[+-]?\d{1,9}", value):
            value = int(value)
    if value is None or value == "":
        raise ValidationError({field: [f"Enter {name}: a whole number from {low} to {high}."]})
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(
            {field: [f"Enter {name} as a whole number from {low} to {high}, not “{value}”."]}
        )
    if not low <= value <= high:
        raise ValidationError({field: [f"{name} must be from {low} to {high}; {value} is not."]})
    return value


def _clean_emails(emails) -> list[str]:
    if isinstance(emails, str) or not isinstance(emails, list | tuple):
        raise ValidationError({"emails": ["Give the e-mail addresses as a list."]})
    cleaned, bad = [], []
    for n, address in enumerate(emails, 1):
        address = str(address).strip()
        if not address:
            continue
        try:
            validate_email(address)
        except ValidationError:
            bad.append(f"“{address[:100]}” (address {n})")
        else:
            cleaned.append(address)
    if bad:
        raise ValidationError({"emails": [f"Not an e-mail address: {'; '.join(bad)}."]})
    cleaned = list(dict.fromkeys(cleaned))
    if len(cleaned) > MAX_EMAILS:
        raise ValidationError(
            {"emails": [f"At most {MAX_EMAILS} addresses; {len(cleaned)} were given."]}
        )
    return cleaned


def _checked(errors: dict[str, list[str]], clean, *args, **kwargs):
    """clean(...); when it is refused, None and the reason added to errors."""
    try:
        return clean(*args, **kwargs)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            errors.setdefault(field, []).extend(messages)
        return None


def _clean_figures(errors: dict, kind: str | None, percent, minutes) -> tuple:
    """(percent, minutes) as the kind wants them; None for the figures it has not."""
    if kind in WITH_PERCENT:
        percent = _checked(
            errors,
            _clean_number,
            "percent",
            percent,
            low=1,
            high=100,
            name="N (the error rate, in percent)",
        )
    else:
        percent = None
    if kind in WITH_MINUTES:
        minutes = _checked(
            errors, _clean_number, "minutes", minutes, low=1, high=MAX_MINUTES, name="M (minutes)"
        )
    else:
        minutes = None
    return percent, minutes


def rule_create(
    *,
    user,
    kind: str,
    percent: int | str | None = None,
    minutes: int | str | None = None,
    emails: list[str] | tuple = (),
    channel: Channel | None = None,
    crawl: Crawl | None = None,
) -> AlertRule:
    """A rule on a channel (staff) or on one crawl (its owner, or staff). Every field is
    checked, and every problem reported at once."""
    errors: dict[str, list[str]] = {}
    if channel is not None and crawl is not None:
        errors["channel"] = ["Choose a channel or a crawl, not both."]
    elif channel is None and crawl is None:
        errors["crawl"] = ["Choose a crawl, or (staff) a channel."]
    if channel is not None and not user.is_staff:
        raise PermissionDenied("Only staff add alert rules to a channel.")
    if crawl is not None and not visible_crawls(user).filter(pk=crawl.pk).exists():
        raise PermissionDenied("Only the crawl's owner or staff add alert rules to it.")
    kind = _checked(errors, _clean_kind, kind)
    percent, minutes = _clean_figures(errors, kind, percent, minutes)
    emails = _checked(errors, _clean_emails, emails)
    if errors:
        raise ValidationError(errors)
    return AlertRule.objects.create(
        channel=channel,
        crawl=crawl,
        kind=kind,
        percent=percent,
        minutes=minutes,
        emails=emails,
        created_by=user,
    )


def rule_update(
    *,
    rule: AlertRule,
    percent: int | None = None,
    minutes: int | None = None,
    emails: list[str] | None = None,
    active: bool | None = None,
) -> AlertRule:
    """Change the figures, the addresses or whether it is on; the kind and target stay. Its
    open episodes stay open: a rule changed does not fire again for what it already said."""
    errors: dict[str, list[str]] = {}
    if percent is not None or minutes is not None:
        new_percent, new_minutes = _clean_figures(
            errors,
            rule.kind,
            rule.percent if percent is None else percent,
            rule.minutes if minutes is None else minutes,
        )
    else:
        new_percent, new_minutes = rule.percent, rule.minutes
    if emails is not None:
        emails = _checked(errors, _clean_emails, emails)
    if errors:
        raise ValidationError(errors)
    rule.percent, rule.minutes = new_percent, new_minutes
    if emails is not None:
        rule.emails = emails
    if active is not None:
        rule.active = active
    rule.save(update_fields=["percent", "minutes", "emails", "active"])
    return rule


def rule_delete(*, rule: AlertRule) -> None:
    """The rule goes; its alerts stay in the crawls' history."""
    rule.delete()


def rules_visible_to(user) -> QuerySet[AlertRule]:
    """Staff: every rule. Others: the rules of their own crawls, and every channel's."""
    rules = AlertRule.objects.select_related("channel", "crawl", "created_by")
    if user.is_staff:
        return rules
    return rules.filter(Q(crawl__created_by=user) | Q(channel__isnull=False))


def can_change(user, rule: AlertRule) -> bool:
    if user.is_staff:
        return True
    return rule.crawl_id is not None and rule.crawl.created_by_id == user.pk


def check_can_change(user, rule: AlertRule) -> None:
    """PermissionDenied unless the user may change the rule (the pages and the API)."""
    if not can_change(user, rule):
        raise PermissionDenied("Only staff change a channel's alert rules.")


def rules_for(crawl: Crawl) -> QuerySet[AlertRule]:
    """The rules that watch this crawl: its own, its channel's and, for a run of a schedule,
    those of the schedule's template (as webhooks do)."""
    targets = Q(crawl_id=crawl.pk) | Q(channel_id=crawl.channel_id)
    if crawl.schedule_id is not None:
        targets |= Q(crawl_id=crawl.schedule.template_id)
    return AlertRule.objects.filter(targets).select_related("channel", "crawl")


def alerts_visible_to(user) -> QuerySet[Alert]:
    """The alerts of the crawls this user may see."""
    return Alert.objects.filter(crawl__in=visible_crawls(user)).select_related("rule", "crawl")
