"""A crawl's settings as the engine's objects: its scope, its fetcher's options, its extraction
rules and credentials, a slice's time budget; and what a slice would refuse in them
(settings_problems), which crawls.services asks before a crawl is saved.
"""

from __future__ import annotations

from django.conf import settings

from crawlhub.http import Fetcher, OptionError, chromium, rendering
from crawls.engine import credentials
from crawls.engine.credentials import Credentials
from crawls.engine.evaluator import Evaluator
from crawls.engine.extraction import RulesError, check_rules, parse_rules
from crawls.engine.scope import Scope, ScopeError
from crawls.models import Crawl, CrawlAuth


class CannotStart(Exception):
    """A slice refused the crawl's settings: they became unusable after they were saved (an
    edit that bypassed crawl_clean, a channel changed since). The message says why."""


def scope_of(crawl: Crawl) -> Scope:
    return Scope(
        seeds=crawl.seeds,
        allowed_domains=crawl.allowed_domains,
        include=crawl.include_patterns,
        exclude=crawl.exclude_patterns,
    )


def fetcher_options(crawl: Crawl) -> dict:
    return {
        "timeout": crawl.timeout,
        "max_bytes": crawl.max_bytes,
        "user_agent_mode": crawl.effective_user_agent_mode(),
        "user_agent": crawl.user_agent,
        "pool_size": crawl.threads,
    }


# The crawl field a Fetcher option comes from, where their names differ.
_FIELD_OF_OPTION = {"pool_size": "threads"}


def settings_problems(crawl: Crawl) -> dict[str, list[str]]:
    """What a slice would refuse in the crawl's settings, by field (each message without the
    field's name: the doors name it); {} when it can start.

    The same checks a Slice makes when it is built (scope_of, fetcher_options), without
    building one: crawls.services.crawl_clean asks, so a crawl is refused when it is saved
    rather than left running with slices that cannot start.
    """
    problems: dict[str, list[str]] = {}
    try:
        scope_of(crawl)
    except ScopeError as exc:
        problems[exc.field] = [exc.message]
    try:
        Fetcher.check_options(**fetcher_options(crawl))
    except OptionError as exc:
        problems.setdefault(_FIELD_OF_OPTION.get(exc.option, exc.option), []).append(exc.message)
    if rule_problems := check_rules(crawl.extract_rules):
        problems["extract_rules"] = rule_problems
    if problem := rendering.selector_problem(crawl.render_wait_selector):
        problems["render_wait_selector"] = [problem]
    if crawl.effective_render_javascript() and not (found := chromium.locate()):
        problems["render_javascript"] = [found.problem]
    return problems


def extractor_of(crawl: Crawl) -> Evaluator | None:
    """The crawl's extraction rules (or its channel's), ready to run in a process of their own
    (started with the first page, ended with the slice); None when it has none."""
    rules = crawl.effective_extract_rules()
    if not rules:
        return None
    try:
        return Evaluator(parse_rules(rules))
    except RulesError as exc:  # saved past the checks, or the channel's rules changed
        raise ValueError("extract_rules: " + "; ".join(exc.problems)) from None


def credentials_of(crawl: Crawl) -> Credentials | None:
    """The crawl's credentials (crawls/engine/credentials.py); None when it has none."""
    try:
        row = crawl.auth
    except CrawlAuth.DoesNotExist:
        return None
    return credentials.from_row(row)


def slice_seconds(crawl: Crawl) -> float:
    """How long a slice crawls before handing over (its budget): CRAWLHUB_SLICE_SECONDS, and
    at least CRAWLHUB_RENDER_SLICE_SECONDS for a crawl that renders, whose slice first starts a
    browser and opens its tabs (RQ runs each slice in a work horse of its own, and the browsers
    end with it)."""
    if crawl.effective_render_javascript():
        return max(settings.CRAWLHUB_SLICE_SECONDS, settings.CRAWLHUB_RENDER_SLICE_SECONDS)
    return settings.CRAWLHUB_SLICE_SECONDS
