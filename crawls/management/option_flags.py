"""A crawl's options on the command line (`manage.py crawl create` and `change`): one flag per
field of the model (CRAWL_OPTIONS), typed as the field is, and the credentials read from files
so that no secret is on the command line."""

from __future__ import annotations

import json
from argparse import ArgumentParser, ArgumentTypeError
from pathlib import Path

from django.core.management.base import CommandError
from django.db import models

from crawls.engine import credentials
from crawls.models import CRAWL_OPTIONS, Crawl, LinesField, RulesField

# Older, shorter names a flag also answers to. A new option needs no line here: its flag is
# its field's name (max_pages: --max-pages; a yes/no field also gets --no-...).
FLAG_ALIASES = {
    "--allowed-domains": ["--allowed-domain"],
    "--include-patterns": ["--include"],
    "--exclude-patterns": ["--exclude"],
    "--no-obey-robots": ["--no-robots"],
}


def _flags(flag: str) -> list[str]:
    return [flag, *FLAG_ALIASES.get(flag, [])]


def _value_type(field: models.Field) -> dict:
    """argparse's reading of one value of a field: its choices, or int, float or text."""
    if field.choices:
        return {"choices": [value for value, _label in field.flatchoices]}
    if isinstance(field, models.IntegerField):
        return {"type": int}
    if isinstance(field, models.FloatField):
        return {"type": float}
    if isinstance(field, models.CharField):
        return {}
    if isinstance(field, RulesField):
        return {"type": _json_rules, "metavar": "JSON"}
    raise TypeError(f"crawl option {field.name}: no command-line form for {type(field).__name__}")


def _json_rules(text: str) -> list:
    """Extraction rules on the command line: a JSON list, or @FILE holding one."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            raise ArgumentTypeError(f"cannot read {text[1:]}: {exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ArgumentTypeError(f"not valid JSON: {exc}") from None


def add_option(parser: ArgumentParser, field: models.Field) -> None:
    """One crawl option as flags. Left out, an option is None: the model's default applies."""
    flag = "--" + field.name.replace("_", "-")
    # argparse formats help with %: a literal one in a help text must be doubled.
    text = str(field.help_text).replace("%", "%%")
    if isinstance(field, LinesField):
        parser.add_argument(
            *_flags(flag), dest=field.name, action="append", help=f"{text} (repeat)"
        )
    elif isinstance(field, models.BooleanField):
        yes_no = parser.add_mutually_exclusive_group()
        yes_no.add_argument(
            *_flags(flag), dest=field.name, action="store_true", default=None, help=text
        )
        yes_no.add_argument(
            *_flags("--no-" + flag[2:]), dest=field.name, action="store_false", default=None
        )
    else:
        parser.add_argument(*_flags(flag), dest=field.name, help=text, **_value_type(field))


def add_create_options(parser: ArgumentParser) -> None:
    parser.add_argument("--name", required=True)
    parser.add_argument("--seed", action="append", required=True, help="start URL (repeat)")
    parser.add_argument("--channel", default="default", help="channel slug")
    for name in CRAWL_OPTIONS:
        add_option(parser, Crawl._meta.get_field(name))
    parser.add_argument(
        "--auth-file",
        metavar="FILE",
        help="the crawl's credentials, a JSON object with any of: "
        f"{', '.join(credentials.INPUTS)} (text, as the form takes them); in a file, so that "
        "no secret is on the command line",
    )
    parser.add_argument(
        "--cookies-file", metavar="FILE", help="a Netscape cookies.txt of the seeds' hosts"
    )
    parser.add_argument(
        "--user",
        help="the crawl's owner (a username); default: the one admin, if there is exactly one",
    )
    parser.add_argument("--start", action="store_true", help="start it at once")


def read_auth(auth_file: str | None, cookies_file: str | None) -> dict[str, str]:
    """The credentials' inputs from --auth-file and --cookies-file; CommandError naming the
    file and what is wrong with it."""
    auth: dict[str, str] = {}
    if auth_file:
        try:
            auth = json.loads(Path(auth_file).read_text(encoding="utf-8"))
        except (OSError, UnicodeError) as exc:
            raise CommandError(f"--auth-file: cannot read {auth_file}: {exc}") from None
        except ValueError as exc:
            raise CommandError(f"--auth-file: {auth_file} is not valid JSON: {exc}") from None
        if not isinstance(auth, dict) or (unknown := set(auth) - set(credentials.INPUTS)):
            raise CommandError(
                f"--auth-file: a JSON object with any of {', '.join(credentials.INPUTS)}"
                + (f"; unknown: {', '.join(sorted(unknown))}" if isinstance(auth, dict) else "")
            )
    if cookies_file:
        try:
            auth["cookies_txt"] = Path(cookies_file).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeError) as exc:
            raise CommandError(f"--cookies-file: cannot read {cookies_file}: {exc}") from None
    return auth
