"""Every setting of a crawl as the crawl page lists it: (label, value, help) rows, in the
model's order, so that an option added to CrawlOptions shows up without a change here.
Credentials show as "set" or "not set", never a value."""

from __future__ import annotations

from django.db import models
from django.template.defaultfilters import filesizeformat
from django.utils.text import capfirst

from crawlhub.http.useragents import DEFAULT_USER_AGENT
from crawls.models import CRAWL_OPTIONS, Crawl, UserAgentMode

# Words for a value that means "the default" or "none", per option.
EMPTY = {
    "allowed_domains": "none: the seeds' hosts",
    "include_patterns": "none: every URL in scope",
    "exclude_patterns": "none",
}
UNITS = {"timeout": "s", "host_delay": "s"}
NO_CAP = {"host_concurrency": "no cap"}


def settings_rows(crawl: Crawl, credentials: dict) -> list[tuple[str, str, str]]:
    rows = [
        ("Channel", crawl.channel.name, "Politeness defaults and proxy pool of the crawl."),
        ("Seeds", "\n".join(crawl.seeds), "Start URLs."),
    ]
    for name in CRAWL_OPTIONS:
        field = Crawl._meta.get_field(name)
        rows.append((capfirst(field.verbose_name), _value(crawl, name, field), field.help_text))
    rows += _credential_rows(credentials)
    return rows


def _value(crawl: Crawl, name: str, field: models.Field) -> str:
    value = getattr(crawl, name)
    if name == "host_delay":
        if value is None:
            return f"the channel's: {crawl.channel.host_delay:g} s"
        return f"{value:g} s"
    if name == "user_agent_mode":
        mode = crawl.effective_user_agent_mode()
        label = dict(field.choices).get(mode, mode)
        return label if value else f"the channel's: {label}"
    if name == "user_agent":
        return _user_agent(crawl)
    if name == "extract_rules":
        rules = crawl.effective_extract_rules()
        text = (
            "\n".join(
                f"{r.get('name', '?')}: {r.get('kind', '')} {r.get('expr', '')}".strip()
                for r in rules
            )
            or "none"
        )
        return text if value or not rules else "the channel's:\n" + text
    if name == "max_bytes":
        return filesizeformat(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) or EMPTY.get(name, "none")
    if value in ("", None):
        return EMPTY.get(name, "none")
    if value == 0 and name in NO_CAP:
        return NO_CAP[name]
    if isinstance(value, float):
        value = f"{value:g}"
    unit = UNITS.get(name)
    return f"{value} {unit}" if unit else str(value)


def _user_agent(crawl: Crawl) -> str:
    """What the crawl sends (client.pick_user_agent): in random mode not this field at all."""
    if crawl.effective_user_agent_mode() == UserAgentMode.RANDOM:
        return (
            "not sent: a random browser's per request (random mode); robots.txt is read for "
            f"{crawl.user_agent or DEFAULT_USER_AGENT}"
        )
    return crawl.user_agent or f"crawlhub's own: {DEFAULT_USER_AGENT}"


def _credential_rows(shown: dict) -> list[tuple[str, str, str]]:
    def state(key: str) -> str:
        names = shown.get(key)
        return f"set ({', '.join(names)})" if names else "not set"

    basic = shown.get("basic_user")
    login = shown.get("login_url")
    basic_text = "not set"
    if basic is not None:
        password = "set" if shown.get("basic_password") else "not set"
        basic_text = f"set (user {basic}, password {password})"
    login_text = "not set"
    if login:
        fields = ", ".join(shown.get("login_fields") or []) or "none"
        login_text = f"set (at {login}; fields {fields})"
    rows = [
        ("Extra headers", state("headers"), "Values are secret: never shown."),
        ("Cookies", state("cookies"), "Values are secret: never shown."),
        ("HTTP basic auth", basic_text, "The password is secret: never shown."),
        ("Login form", login_text, "Field values are secret: never shown."),
    ]
    if origins := shown.get("origins"):
        rows.append(
            (
                "Credentials sent to",
                "\n".join(origins),
                "Fixed when the credentials were entered: a seed added or changed since on another "
                "origin (scheme, host or port) is crawled without them.",
            )
        )
    return rows
