"""The extraction rules' preview: what each rule yields on one page, fetched and read as the
crawl would, within a time limit of its own."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from crawlhub.http import Fetcher, OptionError
from crawlhub.http.urls import validate_url
from crawls.engine.crawl_settings import fetcher_options
from crawls.engine.evaluator import Evaluator
from crawls.engine.extraction import RulesError, parse_rules
from crawls.engine.results import extract as extract_fields
from crawls.models import Channel, Crawl

# The rule preview waits at most this long for its page, whatever the crawl's timeout.
PREVIEW_TIMEOUT = 10.0
# ... and this long for its rules (in a process of their own, killed then): the web server
# spends no more on a preview whose client has gone.
PREVIEW_RULES_SECONDS = 5.0


def rules_preview(
    *, url: str, rules: object, channel: Channel | None = None, **options: Any
) -> dict:
    """What each extraction rule yields on one page, fetched as the crawl would fetch it (its
    user agent, timeout and size limit, the private-network guard) and read as a crawl reads
    it (evaluator.py), every rule in the rule process, in at most PREVIEW_RULES_SECONDS: a rule
    still running then is stopped and says it took too long. Raises ValidationError for a bad
    URL or bad rules, naming them; a page that cannot be fetched is said in "error"."""
    errors: dict[str, list[str]] = {}
    try:
        url = validate_url(url, "url")
    except ValueError as exc:
        errors["url"] = [str(exc)]
    try:
        parsed = parse_rules(rules)
    except RulesError as exc:
        errors["extract_rules"] = exc.problems
    if errors:
        raise ValidationError(errors)
    fetch_options = {k: v for k, v in options.items() if k in PREVIEW_OPTIONS}
    crawl = Crawl(channel=channel or Channel.default(), **fetch_options)
    settings = fetcher_options(crawl)
    settings["timeout"] = min(float(settings["timeout"] or PREVIEW_TIMEOUT), PREVIEW_TIMEOUT)
    try:
        fetcher = Fetcher(**{**settings, "pool_size": 1})
    except OptionError as exc:
        raise ValidationError({exc.option: [str(exc)]}) from None
    with fetcher:
        fetch = fetcher.fetch(url)
    # As the crawl extracts (results.extract): from complete 2xx responses only; a 404's fields
    # would show what the crawl never keeps.
    with Evaluator(parsed, deadline=PREVIEW_RULES_SECONDS, linear_here=False) as evaluator:
        found = extract_fields(fetch, extractor=evaluator, structured=False)
    fields, errors = (found.fields, found.errors) if found else ({}, {})
    answer = f"HTTP {fetch.status}" if fetch.status else "nothing"
    why = "was cut at the size limit" if fetch.truncated else f"answered {answer}"
    not_kept = (
        "" if found else f"The crawl keeps fields of complete 2xx responses only: this page {why}."
    )
    return {
        "url": url,
        "final_url": fetch.final_url,
        "status": fetch.status,
        "error": fetch.error,
        "content_type": fetch.content_type,
        "bytes": fetch.nbytes,
        "truncated": fetch.truncated,
        "fields": fields,
        "field_errors": errors,
        "not_kept": not_kept,
        # Rules whose URL pattern leaves this page out.
        "skipped": [r.name for r in parsed if r.name not in {**fields, **errors}] if found else [],
    }


# The options a preview fetches with (the rest do not change a single fetch).
PREVIEW_OPTIONS = ("timeout", "max_bytes", "user_agent_mode", "user_agent")
