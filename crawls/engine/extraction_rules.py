"""Extraction rules as a crawl stores them (JSON), read and checked all at once.

A rule names a field and says how to find it on a page: a CSS selector, an XPath, a regular
expression (patterns.py: Python's syntax on RE2, linear time) or a JMESPath expression for JSON
responses. Rules come from the form, the API or the CLI: parse_rules says every problem of
every rule at once, each a sentence naming the rule by position and name ("Rule 2 (price):
CSS selector '.price[' is not valid: ..."), and never raises anything else, whatever JSON it is
given. compile_rules gives what extraction.py runs: each expr compiled once.

Reading rules never runs one: an expr is parsed and compiled, its size and nesting bounded
(MAX_EXPR, MAX_NESTING), and what would only fail when it runs (an unknown function, a wrong
number of arguments to a JMESPath function, a variable or namespace prefix in an XPath) is
looked for in what was parsed. A JMESPath expression of 200 characters can make a list of
10^9 items from any input, even {}, and an XPath can take hours on a page of three elements:
what running a rule may cost is bounded where rules run (evaluator.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jmespath
from cssselect import SelectorError
from jmespath.exceptions import (
    ArityError,
    IncompleteExpressionError,
    JMESPathError,
    LexerError,
    ParseError,
    UnknownFunctionError,
    VariadictArityError,
)
from jmespath.functions import Functions
from lxml import etree
from parsel.csstranslator import GenericTranslator, HTMLTranslator

from crawls.engine.patterns import Pattern, PatternError, compile_extractor, compile_pattern

MAX_RULES = 50
MAX_NAME = 64
MAX_EXPR = 1000
# Brackets, parentheses and braces in one another, outside quotes: JMESPath's parser recurses
# past Python's limit at ~340 levels, and no real selector comes near this.
MAX_NESTING = 50

KINDS = ("css", "xpath", "regex", "json")
GETS = ("text", "html", "attr")
KEYS = ("name", "kind", "expr", "get", "attr", "many", "url_pattern")

_NAME = re.compile(r"[A-Za-z0-9_-]+")
# What an HTML or XML attribute name cannot hold.
_NOT_IN_ATTRIBUTE = re.compile(r"[\s\"'>/=\x00-\x1f\x7f]")
# A token in cssselect's messages: <EOF at 7>, <DELIM '#' at 0>.
_CSS_TOKEN = re.compile(r"<(?:EOF|\S+ ('.*?')) at (\d+)>")
_HTML_CSS = HTMLTranslator()
_XML_CSS = GenericTranslator()
# An XPath with an unknown function, a variable or a namespace prefix only fails when it runs
# into it, so they are looked for outside its string literals.
_XPATH_LITERAL = re.compile(r"\"[^\"]*\"|'[^']*'")
_XPATH_VARIABLE = re.compile(r"\$\s*([\w.-]+(?::[\w.-]+)?)")
_XPATH_CALL = re.compile(r"(?<![\w.:@$-])([A-Za-z_][\w.-]*)\s*\(")
_XPATH_OPERATORS = frozenset({"and", "or", "div", "mod"})  # "a div (b)" is no call
# A prefixed name (dc:creator, @xlink:href), not an axis (child::a); "xml" is always declared.
_XPATH_PREFIX = re.compile(r"(?<![\w.:$-])([A-Za-z_][\w.-]*):(?=[A-Za-z_*])")
# XPath 1.0's functions (libxml2 has no others without a prefix) and node tests, which are
# written like calls; with those registered for every XPath in this process (parsel's
# has-class, say).
_XPATH_FUNCTIONS = frozenset(
    {
        "last",
        "position",
        "count",
        "id",
        "local-name",
        "namespace-uri",
        "name",
        "string",
        "string-length",
        "concat",
        "contains",
        "starts-with",
        "substring-before",
        "substring-after",
        "substring",
        "normalize-space",
        "translate",
        "lang",
        "boolean",
        "not",
        "true",
        "false",
        "number",
        "sum",
        "floor",
        "ceiling",
        "round",
        "text",
        "node",
        "comment",
        "processing-instruction",
    }
)
# Where quoted text starts, and ends, in each kind of expr (for MAX_NESTING).
_QUOTES = {"css": "\"'", "xpath": "\"'", "json": "\"'`"}


@dataclass(frozen=True)
class Rule:
    """One named field of every page (see the module docstring); parse_rules makes valid ones."""

    name: str
    kind: str  # one of KINDS
    expr: str
    get: str = "text"  # one of GETS, for css and xpath
    attr: str | None = None  # the attribute, when get is "attr"
    many: bool = False  # every match as a list, else the first match (or None)
    url_pattern: str | None = None  # only for pages whose URL this matches (searched)


class RulesError(ValueError):
    """Rules that cannot be used; `problems` has every one of them, each a sentence."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class CompiledRule(NamedTuple):
    """A rule ready to run: its url_pattern and expr compiled (an expr's kind says what it is:
    css: XPaths for HTML and for XML pages; xpath: an XPath; regex: an ExtractingPattern;
    json: a JMESPath ParsedResult)."""

    rule: Rule
    url: Pattern | None
    expr: object


# -- reading rules ---------------------------------------------------------------------------


def parse_rules(data: object) -> list[Rule]:
    """The rules of their JSON form (a list of objects with the keys in KEYS); RulesError with
    every problem of every rule otherwise, never another exception."""
    return [compiled.rule for compiled in compile_rules(data)]


def check_rules(data: object) -> list[str]:
    """Every problem of the rules' JSON form, [] when they are fine (for a form's field)."""
    try:
        parse_rules(data)
    except RulesError as exc:
        return exc.problems
    return []


def rules_to_json(rules: Sequence[Rule]) -> list[dict[str, object]]:
    """The JSON form parse_rules reads, leaving out what has its default value."""
    defaults = Rule(name="", kind="", expr="")
    return [
        {key: getattr(rule, key) for key in KEYS if getattr(rule, key) != getattr(defaults, key)}
        | {"name": rule.name, "kind": rule.kind, "expr": rule.expr}
        for rule in rules
    ]


def compile_rules(data: object) -> list[CompiledRule]:
    """The rules of their JSON form compiled, as parse_rules reads and checks them."""
    if not isinstance(data, list):
        raise RulesError([f"The rules must be a list of objects, not {_kind_of(data)}"])
    problems = []
    if len(data) > MAX_RULES:
        problems.append(f"There are {len(data):,} rules; a crawl has at most {MAX_RULES}")
    checked, named = [], []
    # Past twice the most, the count is what needs fixing; checking each could take seconds.
    for position, item in enumerate(data[: 2 * MAX_RULES], start=1):
        compiled, rule_problems = _check_rule(item, position)
        problems += rule_problems
        if compiled is not None:
            checked.append(compiled)
        if isinstance(item, dict) and _name_problem(item.get("name")) is None:
            named.append((position, item["name"]))  # a rule with other problems too
    problems += _same_names(named)
    if problems:
        raise RulesError(problems)
    return checked


def _same_names(named: list[tuple[int, str]]) -> list[str]:
    positions: dict[str, list[int]] = {}
    for position, name in named:
        positions.setdefault(name, []).append(position)
    problems = []
    for name, where in positions.items():
        if len(where) > 1:
            numbers = ", ".join(map(str, where[:-1])) + f" and {where[-1]}"
            both = "both" if len(where) == 2 else "all"
            problems.append(f'Rules {numbers} are {both} named "{name}"')
    return problems


def _check_rule(item: object, position: int) -> tuple[CompiledRule | None, list[str]]:
    """The rule at `position` (from 1), compiled, or the sentences saying what is wrong."""
    if not isinstance(item, dict):
        what = _kind_of(item)
        return None, [f"Rule {position}: must be an object with a name, kind and expr, not {what}"]
    name = item.get("name")
    name_problem = _name_problem(name)
    label = f"Rule {position}" if name_problem else f"Rule {position} ({name})"
    problems = [name_problem] if name_problem else []
    unknown = [key for key in item if key not in KEYS]
    if unknown:
        listed = ", ".join(_shown(key) for key in unknown)
        keys = "key" if len(unknown) == 1 else "keys"
        problems.append(f"unknown {keys} {listed}; the keys are {', '.join(KEYS)}")
    kind, expr = item.get("kind"), item.get("expr")
    get = "text" if item.get("get") is None else item.get("get")
    many = False if item.get("many") is None else item.get("many")
    attr, url_pattern = (_given(item.get(key)) for key in ("attr", "url_pattern"))
    compiled, expr_problems = None, _kind_problems(kind, expr)
    if not expr_problems:
        compiled, compile_problem = _compile(kind, expr)
        expr_problems += [compile_problem] if compile_problem else []
    problems += expr_problems
    problems += _get_problems(kind, get, attr)
    if not isinstance(many, bool):
        problems.append(f"many must be true or false, not {_shown(many)}")
    url, url_problem = _url_pattern(url_pattern)
    problems += [url_problem] if url_problem else []
    if problems:
        return None, [f"{label}: {problem}" for problem in problems]
    rule = Rule(name, kind, expr, get=get, attr=attr, many=many, url_pattern=url_pattern)
    return CompiledRule(rule, url, compiled), []


def _given(value: object) -> object:
    """A form sends "" for a field left empty: not given, as null or no key at all."""
    return None if value == "" else value


def is_rule_name(name: object) -> bool:
    """Whether `name` could name a rule, and so a page's field (what a field sort may ask for)."""
    return _name_problem(name) is None


def _name_problem(name: object) -> str | None:
    if name is None:
        return "name is missing"
    if not isinstance(name, str):
        return f"name must be text, not {_kind_of(name)}"
    if not name:
        return "name is empty"
    if len(name) > MAX_NAME:
        return f"name {_shown(name)} is {len(name):,} characters long; at most {MAX_NAME}"
    if not _NAME.fullmatch(name):
        return f"name {_shown(name)} may only hold the letters a-z and A-Z, digits, _ and -"
    if not name[0].isalpha():
        return f"name {_shown(name)} must start with a letter"
    return None


def _kind_problems(kind: object, expr: object) -> list[str]:
    problems = []
    if kind is None:
        problems.append("kind is missing")
    elif kind not in KINDS:
        problems.append(f"kind must be css, xpath, regex or json, not {_shown(kind)}")
    if expr is None:
        problems.append("expr is missing")
    elif not isinstance(expr, str):
        problems.append(f"expr must be text, not {_kind_of(expr)}")
    elif not expr.strip():
        problems.append("expr is empty")
    elif len(expr) > MAX_EXPR:
        problems.append(f"expr is {len(expr):,} characters long; at most {MAX_EXPR:,}")
    return problems


def _get_problems(kind: object, get: object, attr: object) -> list[str]:
    if get not in GETS:
        return [f"get must be text, html or attr, not {_shown(get)}"]
    if get != "text" and kind in ("regex", "json"):
        return [f'get is "{get}" but a {kind} rule has no get (its values are what it finds)']
    if attr is not None and not isinstance(attr, str):
        return [f"attr must be text, not {_kind_of(attr)}"]
    if get == "attr" and attr is None:
        return ['get is "attr" but no attribute is given']
    if get != "attr" and attr is not None:
        return [f'attr {_shown(attr)} is given but get is "{get}", not "attr"']
    if attr is not None and (len(attr) > 200 or _NOT_IN_ATTRIBUTE.search(attr)):
        return [f"attr {_shown(attr)} is not an attribute name"]
    return []


def _url_pattern(text: object) -> tuple[object, str | None]:
    if text is None:
        return None, None
    if not isinstance(text, str):
        return None, f"url_pattern must be text, not {_kind_of(text)}"
    try:
        return compile_pattern(text), None
    except PatternError as exc:
        return None, f"url_pattern {exc}"


def _kind_of(value: object) -> str:
    """What a JSON value is, for a sentence ("not a number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _shown(value: object) -> str:
    if not isinstance(value, str):
        return _kind_of(value)
    return repr(value) if len(value) <= 60 else repr(value[:60]) + "..."


# -- compiling rules -------------------------------------------------------------------------


def _compile(kind: str, expr: str) -> tuple[object, str | None]:
    """What runs the rule's expr, or why it cannot: a sentence about the expr.

    The libraries' own exceptions are expected; anything else they raise on odd input (a
    RecursionError on deep nesting) is a problem of this expr too, never the caller's.
    """
    try:
        if kind != "regex":  # patterns.py bounds a regex's groups itself
            _check_nesting(kind, expr)
        if kind == "css":
            return _compile_css(expr), None
        if kind == "xpath":
            return _compile_xpath(expr), None
        if kind == "regex":
            return compile_extractor(expr), None
        return _compile_jmespath(expr), None
    except _Invalid as exc:
        return None, str(exc)
    except PatternError as exc:
        return None, f"regular expression {exc}"
    except Exception as exc:  # see the docstring
        return None, f"{_EXPR_NAMES[kind]} {_shown(expr)} is not valid: {exc!r}"


_EXPR_NAMES = {
    "css": "CSS selector",
    "xpath": "XPath",
    "regex": "regular expression",
    "json": "JMESPath expression",
}


class _Invalid(ValueError):
    """An expr that does not compile: the sentence."""


def _check_nesting(kind: str, expr: str) -> None:
    depth = nesting(expr, quotes=_QUOTES[kind])
    if depth > MAX_NESTING:
        raise _Invalid(
            f"{_EXPR_NAMES[kind]} {_shown(expr)} nests brackets {depth:,} deep; at most "
            f"{MAX_NESTING} levels"
        )


def nesting(expr: str, *, quotes: str) -> int:
    """How deep (), [] and {} nest in `expr`, outside text quoted with one of `quotes` (a
    backslash escapes the next character there)."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for char in expr:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in quotes:
            quote = char
        elif char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    return deepest


def _compile_css(expr: str) -> tuple[etree.XPath, etree.XPath]:
    """The selector as XPaths for HTML pages (names read case-insensitively) and XML ones."""
    try:
        paths = _HTML_CSS.css_to_xpath(expr), _XML_CSS.css_to_xpath(expr)
    except SelectorError as exc:
        reason = _CSS_TOKEN.sub(_css_token, str(exc))
        raise _Invalid(f"CSS selector {_shown(expr)} is not valid: {reason}") from None
    return _compile_xpath(paths[0], written=False), _compile_xpath(paths[1], written=False)


def _css_token(match: re.Match) -> str:
    value, offset = match.groups()
    if value is None:
        return "the end of the selector"
    return f"{value} at column {int(offset) + 1}"


def _compile_xpath(expr: str, *, written: bool = True) -> etree.XPath:
    """The XPath compiled; _Invalid if it does not compile, or (one `written` by a person, not
    made of a CSS selector) uses a variable, a namespace prefix or a function XPath 1.0 and
    lxml do not have. It is not run."""
    try:
        xpath = etree.XPath(expr, smart_strings=False)
    except (etree.XPathError, ValueError) as exc:
        raise _Invalid(f"XPath {_shown(expr)} is not valid: {exc}") from None
    unquoted = _XPATH_LITERAL.sub("''", expr) if written else ""
    if variable := _XPATH_VARIABLE.search(unquoted):
        raise _Invalid(
            f"XPath {_shown(expr)} is not valid: it uses the variable ${variable[1]}, and rules "
            "have no variables"
        )
    prefixes = [prefix for prefix in _XPATH_PREFIX.findall(unquoted) if prefix != "xml"]
    if prefixes:
        raise _Invalid(
            f"XPath {_shown(expr)} is not valid: it uses the namespace prefix {prefixes[0]}:, "
            "and rules have none (XML pages are read without their namespaces: leave the "
            "prefix out)"
        )
    for name in sorted(set(_XPATH_CALL.findall(unquoted)) - _XPATH_OPERATORS):
        if not _is_function(name):
            raise _Invalid(f"XPath {_shown(expr)} is not valid: there is no function {name}()")
    return xpath


def _is_function(name: str) -> bool:
    """Whether an XPath rule can call `name` (without a prefix)."""
    return name in _XPATH_FUNCTIONS or name.encode() in etree.FunctionNamespace(None)


def _compile_jmespath(expr: str):
    try:
        compiled = jmespath.compile(expr)
        _check_functions(compiled.parsed)
    except JMESPathError as exc:
        raise _Invalid(f"JMESPath expression {_shown(expr)} is not valid: {_why(exc)}") from None
    return compiled


def _check_functions(node: dict) -> None:
    """The errors JMESPath raises only when it calls a function, for every call in the parsed
    expression: an unknown function, a wrong number of arguments."""
    todo = [node]
    while todo:
        node = todo.pop()
        children = [child for child in node.get("children", ()) if isinstance(child, dict)]
        todo += children
        if node.get("type") != "function_expression":
            continue
        name, given = node["value"], len(children)
        entry = Functions.FUNCTION_TABLE.get(name)
        if entry is None:
            raise UnknownFunctionError(f"Unknown function: {name}()")
        signature = entry["signature"]
        if signature and signature[-1].get("variadic"):
            if given < len(signature):
                raise VariadictArityError(len(signature), given, name)
        elif given != len(signature):
            raise ArityError(len(signature), given, name)


def _why(exc: JMESPathError) -> str:
    if isinstance(exc, IncompleteExpressionError):
        return "it ends too soon"
    if isinstance(exc, LexerError):
        return f"{exc.message} at column {exc.lexer_position + 1}"
    if isinstance(exc, ParseError) and getattr(exc, "lex_position", None) is not None:
        return f"{exc.msg} at column {exc.lex_position + 1}"
    return str(exc)
