"""A crawl's inputs cleaned, whichever door they came by: seeds, domains, patterns, rules,
every option and the credentials, each bad value named with its field (and its line where it
has lines), every problem at once. What the audit trail says of credentials is here too: the
words are made from the same parsed values."""

from __future__ import annotations

import copy
import math
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from crawlhub.http import netguard
from crawlhub.http.urls import validate_url
from crawls.engine import credentials
from crawls.engine.crawl_settings import settings_problems
from crawls.engine.extraction import RulesError, parse_rules, rules_to_json
from crawls.engine.scope import ScopeError, compile_patterns
from crawls.models import CRAWL_OPTIONS, Channel, Crawl


def _lines(value: list[str] | str, field: str) -> list[str]:
    """A list of lines, given as text (one value per line) or as a list of strings."""
    if isinstance(value, str):
        return value.splitlines()
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ValidationError({field: ["Give a list of strings, or text with one value per line."]})


def clean_seeds(urls: list[str] | str, *, field: str = "seeds") -> list[str]:
    """Validated, stripped, de-duplicated seed URLs (order kept)."""
    cleaned, errors = [], []
    for n, raw in enumerate(_lines(urls, field), start=1):
        if not raw.strip():
            continue
        try:
            cleaned.append(validate_url(raw, field=f"line {n}"))
            netguard.guard_url(cleaned[-1])
        except netguard.BlockedAddress as exc:
            cleaned.pop()
            errors.append(f"line {n}: {raw.strip()!r} is refused: {exc}")
        except ValueError as exc:
            errors.append(str(exc))
    if errors:
        raise ValidationError({field: errors})
    if not cleaned:
        raise ValidationError({field: ["Give at least one http(s) URL."]})
    return list(dict.fromkeys(cleaned))


def _clean_domains(domains: list[str] | str) -> list[str]:
    if isinstance(domains, str):
        domains = domains.replace(",", "\n")
    cleaned, errors = [], []
    for raw in _lines(domains, "allowed_domains"):
        domain = raw.strip().lower().rstrip(".")
        if not domain:
            continue
        if "/" in domain or " " in domain or ":" in domain or not domain.isprintable():
            errors.append(f"{raw!r} is not a domain name (no scheme, path or port)")
        cleaned.append(domain)
    if errors:  # every bad line at once
        raise ValidationError({"allowed_domains": errors})
    return cleaned


def clean_patterns(patterns: list[str] | str, field: str) -> list[str]:
    patterns = _lines(patterns, field)
    try:
        # Blank lines are skipped there but still counted, so "line N" points at the input.
        compile_patterns(list(patterns), field)
    except ScopeError as exc:
        raise ValidationError({field: exc.problems}) from None
    return [p.strip() for p in patterns if p.strip()]


def value_problem(field: models.Field, value: Any) -> str:
    """What full_clean would not say about an option's value, or "": text that is not text,
    numbers that are not finite (NaN passes every min and max), a NUL (PostgreSQL stores none)."""
    if isinstance(field, models.CharField) and not isinstance(value, str):
        return f"Expected text, got {type(value).__name__}."
    numeric = isinstance(field, models.IntegerField | models.FloatField)
    if numeric and isinstance(value, float | str):
        try:
            if not math.isfinite(float(value)):
                return "Enter a finite number."
        except ValueError:
            pass  # not a number at all: full_clean says so
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        return "Null characters are not allowed."
    return ""


def clean_rules(data: object) -> list[dict]:
    """Extraction rules as stored: every problem of every rule at once, each naming its rule.
    None (an admin's empty JSON box) is no rules."""
    if data is None:
        return []
    try:
        return rules_to_json(parse_rules(data))
    except RulesError as exc:
        raise ValidationError({"extract_rules": exc.problems}) from None


def crawl_clean(
    *, name: str, seeds: list[str] | str, channel: Channel | None = None, **options: Any
) -> Crawl:
    """An unsaved, validated crawl. Raises ValidationError naming every bad field at once.

    Every door goes through here, creating and editing alike. The crawl's settings are checked
    as a slice will check them when it starts, in the same pass: each of those checks is about
    one field, so a field already refused is left out of them rather than holding back the
    others' messages for a second round."""
    crawl, errors = _crawl_checked(name=name, seeds=seeds, channel=channel, options=options)
    if errors:
        raise ValidationError(errors)
    return crawl


def _crawl_checked(
    *, name: str, seeds: list[str] | str, channel: Channel | None, options: dict[str, Any]
) -> tuple[Crawl, dict[str, list[str]]]:
    """The unsaved crawl and every problem of its fields, by field ({} when it is valid)."""
    unknown = set(options) - set(CRAWL_OPTIONS)
    if unknown:
        raise TypeError(f"unknown crawl options: {', '.join(sorted(unknown))}")
    name = "" if name is None else name
    errors: dict[str, list[str]] = {}
    for field, value in {"name": name, **options}.items():
        if problem := value_problem(Crawl._meta.get_field(field), value):
            errors[field] = [problem]
    values: dict[str, Any] = {k: v for k, v in options.items() if k not in errors}
    cleaners = {
        "seeds": lambda: clean_seeds(seeds),
        "allowed_domains": lambda: _clean_domains(options.get("allowed_domains", [])),
        "include_patterns": lambda: clean_patterns(
            options.get("include_patterns", []), "include_patterns"
        ),
        "exclude_patterns": lambda: clean_patterns(
            options.get("exclude_patterns", []), "exclude_patterns"
        ),
        "extract_rules": lambda: clean_rules(options.get("extract_rules", [])),
    }
    for field, cleaner in cleaners.items():
        if field in errors:
            continue
        try:
            values[field] = cleaner()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    name = "" if "name" in errors else name.strip()
    crawl = Crawl(name=name, channel=channel or Channel.default(), **values)
    try:
        crawl.full_clean(exclude=["seeds", "created_by"] + list(errors))
    except ValidationError as exc:
        errors.update(exc.message_dict)
    # What a slice would refuse when it starts (a user agent with a line break, a domain that
    # is no host name...), by the same checks, on the fields not refused already: those are
    # checked with their defaults in place of what was given.
    checked = copy.copy(crawl)
    for field in errors:
        if field == "seeds":
            checked.seeds = []
        elif field in CRAWL_OPTIONS:
            setattr(checked, field, Crawl._meta.get_field(field).get_default())
    checked.seeds = checked.seeds or []
    for field, problems in settings_problems(checked).items():
        errors.setdefault(field, problems)
    return crawl, errors


def clean_credentials(
    *, seeds: list[str] | str | None, auth: dict[str, Any]
) -> credentials.Credentials | None:
    """A crawl's credentials from a door's inputs (credentials.INPUTS: headers, cookie,
    cookies_txt, basic_user, basic_password, login_url, login_fields, login_check_selector,
    login_check_url); None when they are all empty. ValidationError names each bad input, and
    its line where it has lines, never repeating a secret. Seeds None (they were refused):
    every input is checked but for what depends on the seeds' hosts."""
    unknown = set(auth) - set(credentials.INPUTS)
    if unknown:
        raise TypeError(f"unknown credentials: {', '.join(sorted(unknown))}")
    found = None
    if seeds is not None:
        lines = seeds.splitlines() if isinstance(seeds, str) else [str(seed) for seed in seeds]
        found = [line.strip() for line in lines if line.strip()]
    try:
        parsed = credentials.parse(found, auth)
    except credentials.CredentialsProblems as exc:
        raise ValidationError({k: [v] for k, v in exc.problems.items()}) from None
    return None if credentials.is_empty(parsed) else parsed


def credentials_note(found: credentials.Credentials, *, verb: str = "") -> str:
    """What the audit trail says of credentials entered: which kinds and the origins they are
    bound to, no value ("credentials: headers X-Api-Key; basic auth as bob; bound to ...";
    with a verb, "credentials re-entered: ...")."""
    shown = credentials.masked(found)
    kinds = [
        f"{label} {', '.join(shown[key])}"
        for key, label in (
            ("headers", "headers"),
            ("cookies", "cookies"),
            ("login_fields", "login fields"),
        )
        if shown.get(key)
    ]
    if found.basic_user:
        kinds.append(f"basic auth as {found.basic_user}")
    if found.login_url:
        kinds.append(f"login at {found.login_url}")
    kinds.append(f"bound to {credentials.origins_text(found.origins)}")
    return (f"credentials {verb}: " if verb else "credentials: ") + "; ".join(kinds)


def binding_note(found: credentials.Credentials, seeds: list[str]) -> str:
    """Where saved credentials go, for a crawl of these seeds: "bound to A", or "bound to A
    only: not sent to B" when some seeds are on origins they were not entered for."""
    note = f"bound to {credentials.origins_text(found.origins)}"
    if left_out := credentials.origins_left_out(found, seeds):
        note += f" only: not sent to {', '.join(left_out)}"
    return note


def crawl_problems(
    *,
    name: str,
    seeds: list[str] | str,
    channel: Channel | None = None,
    auth: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, list[str]]:
    """What crawl_create would refuse in these values, by field; {} when it would create the
    crawl. For a form some of whose inputs could not even be read: it checks the rest in the
    same round, so that every message comes at once."""
    return _crawl_and_credentials(name, seeds, channel, auth, options)[2]


def _crawl_and_credentials(
    name, seeds, channel, auth, options
) -> tuple[Crawl, credentials.Credentials | None, dict[str, list[str]]]:
    crawl, errors = _crawl_checked(name=name, seeds=seeds, channel=channel, options=options)
    found = None
    if auth:
        # Checked in the same round as the seeds; with seeds that are wrong, but for what
        # depends on their hosts (that would only add noise).
        try:
            found = clean_credentials(seeds=None if "seeds" in errors else crawl.seeds, auth=auth)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    return crawl, found, errors
