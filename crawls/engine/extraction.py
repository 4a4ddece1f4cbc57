"""Extraction: the fields a crawl's rules (extraction_rules.py) pull out of each page it fetches.

An Extractor compiles a crawl's rules once and runs them on each page. A page only ever makes
values or errors, never an exception, and what it can yield is bounded whatever the site sends:
MAX_VALUE characters a value (JSON nested MAX_DEPTH deep at most), MAX_VALUES values a rule,
MAX_PAGE_BYTES a page. What running a rule costs is not bounded here: an XPath or a CSS
selector can take hours on a page of a few hundred kilobytes, a JMESPath expression gigabytes.
Crawls and the preview run their rules through evaluator.py, in a process of their own
(rule_process.py) that bounds each rule's CPU time and memory, raising Overrun into a rule that
runs too long. The page as the rules read it (its text, tree and JSON, each made once) and
the page's bounds are in extraction_page.py.

What a value is: css and xpath rules run on HTML or XML pages (by content type, else by how the
body starts; XML without namespaces); "text" is an element's text, whitespace collapsed, or a
text node, attribute or XPath string or number as it is, stripped; "html" an element's outer
markup; "attr" an element's attribute (one that holds a URL, such as href or src, made absolute
against the page as its links are, also when an XPath or ::attr() ends in it). regex rules
search the decoded text (group 1, else the whole match). Empty values are left out: without
many a rule gives the first non-empty one. json rules give the JSON their JMESPath finds, as it
is (many: as a list, null as []).

Values are JSON a database takes as is: NUL and unpaired surrogates (which PostgreSQL's jsonb
refuses) become U+FFFD, and JSON's NaN and infinities become null.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from jmespath.exceptions import JMESPathError
from lxml import etree

from crawls.engine.extraction_page import (
    MAX_PAGE_BYTES,
    BoundReached,
    NoValue,
    Page,
)
from crawls.engine.extraction_rules import (
    MAX_RULES,
    CompiledRule,
    Rule,
    RulesError,
    check_rules,
    compile_rules,
    parse_rules,
    rules_to_json,
)

# The rules' API, so that extraction is one import for those who use it.
__all__ = [
    "MAX_RULES",
    "Extraction",
    "Extractor",
    "Rule",
    "RulesError",
    "check_rules",
    "parse_rules",
    "rules_to_json",
]

# Attributes whose value is a URL: an "attr" value of one is made absolute, as links are.
URL_ATTRIBUTES = frozenset(
    {
        "href",
        "src",
        "action",
        "formaction",
        "poster",
        "cite",
        "data",
        "background",
        "longdesc",
        "manifest",
        "codebase",
        "usemap",
        "icon",
        "ping",
    }
)
_LAST_ATTRIBUTE = re.compile(r"/@([A-Za-z_][\w.:-]*)\s*$")
MAX_VALUE = 10_000  # characters of one value (JSON: of the value written as JSON)
MAX_VALUES = 1_000  # values of one `many` rule on one page
# Levels of lists and objects in one JSON value (SQLite's JSON reads up to 1,000).
MAX_DEPTH = 100
# CPU time a regex rule may search one page for: RE2 takes linear time per match, but a
# pattern whose every match reads to the end of the text (a(.*z)?) makes that quadratic.
MAX_REGEX_SECONDS = 0.25

_TEXT_OF = etree.XPath("string()")


@dataclass
class Extraction:
    """What the rules took from one page: name -> value, and name -> why a rule failed.

    A rule whose url_pattern does not match the page is in neither.
    """

    fields: dict[str, object] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


# -- running rules ---------------------------------------------------------------------------


Outcome = tuple[object, str | None]  # a rule's value, and why it is missing or short
# What runs one rule on a page, given the rule's index and the run (rule_process.Bounds).
Guard = Callable[[int, Callable[[], Outcome]], Outcome]


class Extractor:
    """A crawl's rules, compiled once, run on page after page by extract, in this process and
    without a bound on time or memory (see the module docstring).

    One Extractor can serve several threads: a compiled XPath takes a lock while it runs,
    JMESPath and RE2 programs are only read.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        """RulesError when `rules` are not what parse_rules would give (stored long ago)."""
        self._rules = [_Runner(compiled) for compiled in compile_rules(rules_to_json(rules))]
        self.names = [runner.name for runner in self._rules]

    def extract(self, *, url: str, body: bytes, content_type: str) -> Extraction:
        """The fields of one page; what the page holds makes values or errors, never raises.

        The page is decoded, parsed into a tree and read as JSON at most once each, and only
        when a rule that applies to its URL needs it.
        """
        return self.extract_page(Page(url=url, body=body, content_type=content_type))

    def extract_page(
        self, page: Page, *, skip: Container[int] = (), guard: Guard | None = None
    ) -> Extraction:
        """extract, leaving out the rules whose index is in `skip`, each rule run by `guard`."""
        return self.extraction(self.outcomes(page, skip=skip, guard=guard))

    def outcomes(
        self, page: Page, *, skip: Container[int] = (), guard: Guard | None = None
    ) -> dict[int, Outcome]:
        """What each rule that applies to the page gives, by the rule's index."""
        found = {}
        for index, rule in enumerate(self._rules):
            if index in skip or (rule.url is not None and not rule.url.search(page.url)):
                continue
            found[index] = (guard or _unguarded)(index, rule.bound_run(page))
        return found

    def extraction(self, outcomes: dict[int, Outcome]) -> Extraction:
        """Outcomes by rule index as an Extraction: by name, in the rules' order."""
        extraction = Extraction()
        for index in sorted(outcomes):
            name = self._rules[index].name
            extraction.fields[name], error = outcomes[index]
            if error:
                extraction.errors[name] = error
        return extraction

    def applies(self, index: int, url: str) -> bool:
        """Whether the rule at `index` runs on a page at `url` (its url_pattern matches)."""
        pattern = self._rules[index].url
        return pattern is None or pattern.search(url)


def _unguarded(index: int, run: Callable[[], Outcome]) -> Outcome:
    try:
        return run()
    except MemoryError:
        return None, "the rule ran out of memory on this page"


class Overrun(BaseException):
    """Raised into a running rule when it passed a bound on running it (rule_process.py's CPU
    time): the rule keeps the values it found, and says why there are no more. Not an
    Exception, so that no library's `except Exception` swallows it."""


class _Runner:
    """One compiled rule, run on a page."""

    __slots__ = ("rule", "name", "url", "expr")

    def __init__(self, compiled: CompiledRule) -> None:
        self.rule, self.url, self.expr = compiled
        self.name = self.rule.name

    def run(self, page: Page) -> Outcome:
        """(value, error): a str, list or JSON value or None, and why it is missing or short."""
        values = _Values(page, many=self.rule.many)
        try:
            if self.rule.kind == "json":
                values.take_json(_json_found(self.expr, page))
            elif self.rule.kind == "regex":
                values.take_text(_regex_values(self.expr, page))
            else:
                values.take_text(self._node_values(page))
        except BoundReached as exc:
            values.problems.append(str(exc))
        except Overrun as exc:
            kept = "; the values found by then are kept" if values.kept else ""
            values.problems.append(f"{exc}{kept}")
        except NoValue as exc:
            return None, str(exc)
        except MemoryError:
            raise  # the process's bound, not the rule's own failure: the guard says which
        except Exception as exc:  # one rule's failure is its own error
            return None, f"the rule failed on this page: {exc!r}"
        return values.result(), "; ".join(values.problems) or None

    def bound_run(self, page: Page) -> Callable[[], Outcome]:
        return lambda: self.run(page)

    def _node_values(self, page: Page) -> Iterator[str | None]:
        tree = page.tree()
        xpath = self.expr if self.rule.kind == "xpath" else self.expr[tree.method == "xml"]
        try:
            found = xpath(tree.root)
        except etree.XPathError as exc:
            raise NoValue(f"XPath evaluation error: {exc}") from None
        get, attr = self.rule.get, self.rule.attr
        # An XPath that ends in a URL attribute (//a/@href, a css ::attr(href)) gives URLs.
        ends_in = _LAST_ATTRIBUTE.search(xpath.path)
        urls = bool(ends_in) and ends_in[1].lower() in URL_ATTRIBUTES
        for item in found if isinstance(found, list) else [found]:
            value = _node_value(item, get=get, attr=attr, method=tree.method, page=page)
            yield page.absolute(value) if urls and isinstance(value, str) and value else value


def _node_value(item: object, *, get: str, attr: str | None, method: str, page: Page) -> str | None:
    """One XPath result as a value: an element's collapsed text, outer HTML or attribute; a
    text node, attribute value, string or number as it is, stripped."""
    if isinstance(item, etree._Element):
        if get == "attr":
            value = item.get(attr) if isinstance(item.tag, str) else None
            return page.absolute(value) if value and attr.lower() in URL_ATTRIBUTES else value
        if get == "html":
            text = etree.tostring(item, method=method, encoding="unicode", with_tail=False)
            page.note_read(len(text))
            return text
        text = _TEXT_OF(item)
        page.note_read(len(text))
        return " ".join(text.split())
    if get == "attr":
        return None  # a string has no attributes
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float):
        return _number(item)
    return str(item).strip()


def _number(value: float) -> str:
    """As XPath writes numbers: 3, not 3.0."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return str(int(value)) if value.is_integer() else repr(value)


def _regex_values(pattern, page: Page) -> Iterator[str]:
    started = time.thread_time()
    for value in pattern.finditer(page.utf8()):
        yield value.decode("utf-8", "replace")
        if time.thread_time() - started > MAX_REGEX_SECONDS:
            raise BoundReached(
                f"the search took over {MAX_REGEX_SECONDS} s on this page; the matches found "
                "by then are kept"
            )


def _json_found(expr, page: Page) -> object:
    try:
        return expr.search(page.json())
    except JMESPathError as exc:
        raise NoValue(f"JMESPath evaluation error: {exc}") from None


class _Values:
    """One rule's values on one page, kept within the bounds, and why some were not."""

    def __init__(self, page: Page, *, many: bool) -> None:
        self.page, self.many = page, many
        self.kept: list[object] = []
        self.problems: list[str] = []
        self.cut = 0

    def result(self) -> object:
        if self.many:
            return self.kept
        return self.kept[0] if self.kept else None

    def take_text(self, values: Iterable[str | None]) -> None:
        """Non-empty values in order: the first, or (many) up to MAX_VALUES."""
        try:
            for raw in values:
                if not raw:
                    continue  # whitespace between tags, an absent attribute
                if not self._keep_text(raw) or not self.many:
                    break
        finally:  # a bound may stop the values: what was cut before still is
            self._say_cut()

    def take_json(self, found: object) -> None:
        """What the expr found, as it is; with many, as a list (null is none, a list its items)."""
        if not self.many:
            self._keep_json(found)
        else:
            items = [] if found is None else found if isinstance(found, list) else [found]
            for item in items:
                if not self._keep_json(item):
                    break
        self._say_cut()

    def _keep_text(self, raw: str) -> bool:
        value = _storable(raw)
        if len(value) > MAX_VALUE:
            value = value[:MAX_VALUE]
            self.cut += 1
        return self._keep(value, len(value.encode()))

    def _keep_json(self, value: object) -> bool:
        if isinstance(value, str):
            return self._keep_text(value)
        try:
            # Bounded before it is written: a list can hold one list a million times over.
            value = json_safe(value, most=MAX_VALUE)
        except TooLarge as exc:
            self.problems.append(f"a value {exc}; it is left out")
            return True
        written = json.dumps(value, ensure_ascii=False)
        if len(written) > MAX_VALUE:
            self.problems.append(
                f"a value is {len(written):,} characters of JSON, more than {MAX_VALUE:,}; "
                "it is left out"
            )
            return True
        return self._keep(value, len(written.encode()))

    def _keep(self, value: object, size: int) -> bool:
        """Whether the value fits (then it is kept), and more may follow."""
        if len(self.kept) == MAX_VALUES:
            self.problems.append(
                f"more than {MAX_VALUES:,} values; the first {MAX_VALUES:,} are kept"
            )
            return False
        if not self.page.spend(size):
            self.problems.append(
                f"the page's values reached {MAX_PAGE_BYTES // 1024} KB; the rest are left out"
            )
            return False
        self.kept.append(value)
        return True

    def _say_cut(self) -> None:
        if self.cut:
            some = "a value was" if self.cut == 1 else f"{self.cut:,} values were"
            self.problems.append(f"{some} cut to {MAX_VALUE:,} characters")
            self.cut = 0


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(text: str) -> str:
    """`text` as PostgreSQL's jsonb takes it: no NUL, no unpaired surrogate (from JSON's
    "\\ud800" escapes)."""
    return _UNSTORABLE.sub("\ufffd", text)


class TooLarge(ValueError):
    """A JSON value past json_safe's bounds: what it is, as the end of "a value ..."."""


def json_safe(value: object, *, most: int | None = None) -> object:
    """A JSON value with storable strings and no NaN or infinity (JSON has neither).

    TooLarge when it holds more than `most` values (lists, objects and what they hold: each
    at least a character of JSON), or nests deeper than MAX_DEPTH. Without `most`, the
    caller knows the value is a small one."""
    left = [most if most is not None else math.inf]

    def safe(value: object, depth: int) -> object:
        left[0] -= 1
        if left[0] < 0:
            raise TooLarge(f"holds more than {most:,} values, more than {most:,} characters")
        if isinstance(value, str):
            return _storable(value)
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict | list | tuple) and depth == MAX_DEPTH:
            raise TooLarge(f"nests lists and objects over {MAX_DEPTH} deep")
        if isinstance(value, dict):
            return {_storable(str(key)): safe(item, depth + 1) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [safe(item, depth + 1) for item in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return _storable(str(value))

    return safe(value, 0)
