"""Include and exclude patterns: Python regular expressions, run on RE2.

Python's re backtracks: `(a+)+$` searched in a URL of 40 "a"s and a "!" runs for days, and a
slice searches every link of every page. RE2 (google-re2) does not backtrack: a search takes
time linear in the URL's length, whatever the pattern. So a pattern is read as Python reads it
(a pattern Python refuses gets Python's message) and run on RE2 with the same meaning:
- spellings that differ are translated: Python's \\Z is RE2's \\z, {,n} is {0,n}, a "[" inside
  a set is a plain "[" (RE2 would read "[[:alpha:]]" as a class), octal escapes, \\uXXXX,
  \\UXXXXXXXX, \\N{name} and a set's \\b become \\x{...}, and named groups become plain groups
  (only their numbers are read);
- what RE2 cannot do is refused, by name: backreferences, lookahead and lookbehind, atomic
  groups, possessive quantifiers, conditional groups, comments, and the a, L, u and x flags.
Linear time is not yet quick time: a search costs up to (URL length) x (program size), so
limits keep programs small. A pattern has at most MAX_LENGTH characters, MAX_NESTING nested
groups and RE2's 1,000 repetitions (nested counts multiply); a field's patterns, searched as
one, compile to at most MAX_PROGRAM instructions. Measured on adversarial patterns at that
limit: about 0.1 s per 8,000-character URL at worst; a hundred ordinary URL patterns compile to
about 7,000 and take microseconds.

Links are ASCII (paths percent-encoded, hosts in punycode) without line breaks, so RE2's ASCII
\\d, \\w, \\s and \\b match what Python's Unicode ones would, and "$" means the end of the URL
in both (Python's also matches before a final newline).

Extraction rules (extraction.py) search page text with compile_extractor: the same reading,
checks and limits, with groups kept, since the value is group 1. Page text is not ASCII: there
\\d, \\w, \\s and \\b stay ASCII-only, and "$" is only the end of the text.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterator
from typing import AnyStr

import re2

MAX_LENGTH = 1000
MAX_NESTING = 50
MAX_PROGRAM = 20_000  # RE2 instructions, for a pattern and for a field's patterns together
MAX_MEMORY = 8 << 20  # bytes RE2 may use for one field's patterns: program and search caches
ENGINE = "crawlhub's linear-time pattern engine"

_FLAGS_RE2_HAS = frozenset("ims-")
_FLAG_NAMES = {"a": "ASCII", "L": "locale", "u": "Unicode", "x": "verbose"}
_OCTAL = frozenset("01234567")
# What Python reads as a repeat: {m}, {m,}, {,n}, {m,n}, {,} ("{}" and "{x}" are literals).
_QUANTIFIER = re.compile(r"\{(?:(\d+)|(\d*),(\d*))\}")
# RE2 errors that mean the pattern is fine for Python but too big for RE2.
_TOO_MANY_REPEATS = "invalid repetition size"
_TOO_LARGE = "pattern too large"
_GROUPS = (
    # (how the group opens, what it is), longest first
    ("(?<=", "a lookbehind (?<=...)"),
    ("(?<!", "a negative lookbehind (?<!...)"),
    ("(?P=", "a backreference (?P=name)"),
    ("(?=", "a lookahead (?=...)"),
    ("(?!", "a negative lookahead (?!...)"),
    ("(?>", "an atomic group (?>...)"),
    ("(?(", "a conditional group (?(...)...)"),
    ("(?#", "a comment (?#...)"),
)


class PatternError(ValueError):
    """Why a pattern cannot be used, as a sentence about it ("'(a)\\\\1' uses a ...")."""


def _options(*, capture: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the error goes to the person who wrote the pattern
    options.never_capture = not capture  # scope only asks "does it match?"
    options.max_mem = MAX_MEMORY
    return options


_OPTIONS = _options(capture=False)
_CAPTURING = _options(capture=True)


def _re2(engine_pattern: str, options: re2.Options = _OPTIONS):
    """RE2's compiled pattern; re2.error when RE2 refuses it.

    re2.compile keeps the last 128 compiled in a cache of its own; a program refused below for
    its size can take megabytes, so the cache is emptied at once (patterns are compiled once per
    slice or save, never per URL).
    """
    try:
        return re2.compile(engine_pattern, options)
    finally:
        re2.purge()


class Pattern:
    """One pattern as its author wrote it (`pattern`) and what RE2 runs (`engine_pattern`)."""

    __slots__ = ("pattern", "engine_pattern", "_regexp")

    def __init__(self, pattern: str, engine_pattern: str, regexp) -> None:
        self.pattern = pattern
        self.engine_pattern = engine_pattern
        self._regexp = regexp

    def __repr__(self) -> str:
        return f"Pattern({self.pattern!r})"

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in `text`, as Python's re.search would say."""
        return self._regexp.search(text) is not None


class ExtractingPattern:
    """A pattern whose matches are values: group 1 when it has groups, else the whole match
    (as Python's re.findall gives for one group; an unmatched group 1 gives "").

    Only empty values can differ from Python's: after an empty match RE2 moves on a character
    where Python first tries a longer match at the same place, and a repeated group whose last
    round is empty keeps the round before where Python gives "".

    Text may be str or bytes (UTF-8), and values come back as the same type: a page's text
    encoded once is searched by every rule, where RE2 would encode a str on every call.
    """

    __slots__ = ("pattern", "engine_pattern", "_regexp", "_group")

    def __init__(self, pattern: str, engine_pattern: str, regexp) -> None:
        self.pattern = pattern
        self.engine_pattern = engine_pattern
        self._regexp = regexp
        self._group = 1 if regexp.groups else 0

    def __repr__(self) -> str:
        return f"ExtractingPattern({self.pattern!r})"

    def search(self, text: AnyStr) -> AnyStr | None:
        """The first match's value; None when nothing matches."""
        return next(self.finditer(text), None)

    def findall(self, text: AnyStr, *, limit: int | None = None) -> list[AnyStr]:
        """The values of the matches, in order, at most `limit` of them."""
        return list(itertools.islice(self.finditer(text), limit))

    def finditer(self, text: AnyStr) -> Iterator[AnyStr]:
        """The values one by one: each search takes time linear in the text, whatever the
        pattern, and the caller stops when it has enough."""
        group, empty = self._group, text[:0]
        for match in self._regexp.finditer(text):
            value = match.group(group)
            yield empty if value is None else value


def compile_pattern(text: str) -> Pattern:
    """`text` ready to search with; PatternError saying what is wrong with it otherwise."""
    engine_pattern, regexp = _compiled(text, _OPTIONS)
    return Pattern(text, engine_pattern, regexp)


def compile_extractor(text: str) -> ExtractingPattern:
    """`text` ready to pull values out of page text, checked and limited as compile_pattern
    checks a URL pattern; PatternError saying what is wrong with it otherwise."""
    engine_pattern, regexp = _compiled(text, _CAPTURING)
    return ExtractingPattern(text, engine_pattern, regexp)


def _compiled(text: str, options: re2.Options) -> tuple[str, object]:
    """What RE2 runs for `text`, and RE2's program for it, once every check has passed."""
    if len(text) > MAX_LENGTH:
        raise PatternError(
            f"{text[:40]!r}... is {len(text):,} characters long; a pattern has at most "
            f"{MAX_LENGTH:,}"
        )
    depth = nesting(text)
    if depth > MAX_NESTING:
        raise PatternError(
            f"{_shown(text)} nests groups {depth:,} deep; at most {MAX_NESTING} levels"
        )
    try:
        re.compile(text)
    except re.error as exc:
        raise PatternError(f"{text!r} is not a valid regular expression: {exc}") from None
    engine_pattern = _Translator(text).run()
    try:
        regexp = _re2(engine_pattern, options)
    except re2.error as exc:
        raise PatternError(f"{text!r} {_re2_problem(exc)}") from None
    if regexp.programsize > MAX_PROGRAM:
        raise PatternError(f"{text!r} is {_too_complex(regexp.programsize)}")
    return engine_pattern, regexp


def match_any(patterns: list[Pattern]) -> Pattern | None:
    """One pattern that matches where any of `patterns` does (None for none), searched in one
    pass; PatternError when they are too large together."""
    if not patterns:
        return None
    if len(patterns) == 1:
        return patterns[0]
    # Each in a group of its own: a leading (?i) then covers its own pattern only.
    joined = "|".join(f"(?:{p.engine_pattern})" for p in patterns)
    try:
        regexp = _re2(joined)
        size = regexp.programsize
    except re2.error:
        size = None
    if size is None or size > MAX_PROGRAM:
        raise PatternError(f"the {len(patterns)} patterns together are {_too_complex(size)}")
    return Pattern("\n".join(p.pattern for p in patterns), joined, regexp)


def nesting(text: str) -> int:
    """How deep groups nest in `text` (read loosely: `text` may not be a valid pattern)."""
    depth = deepest = 0
    i, in_set = 0, False
    while i < len(text):
        char = text[i]
        i += 1
        if char == "\\":
            i += 1
        elif in_set:
            in_set = char != "]"
        elif char == "[":
            in_set = True
            i += text.startswith("^", i)
            i += text.startswith("]", i)  # "]" first in a set is a literal
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(depth - 1, 0)
    return deepest


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 100 else repr(text[:100]) + "..."


def _text(exc: re2.error) -> str:
    message = exc.args[0] if exc.args else ""
    return message.decode(errors="replace") if isinstance(message, bytes) else str(message)


def _re2_problem(exc: re2.error) -> str:
    """What RE2's refusal means, for a pattern Python accepted and _Translator let through."""
    message = _text(exc)
    if message.startswith(_TOO_MANY_REPEATS):
        count = message.partition(": ")[2]
        return (
            f"repeats something more than 1,000 times ({count}); {ENGINE} allows 1,000 at "
            "most, counting nested repeats multiplied"
        )
    if message.startswith(_TOO_LARGE):
        return "is " + _too_complex(None)
    return f"cannot be used: {ENGINE} does not support it ({message})"


def _too_complex(size: int | None) -> str:
    """What follows "is" or "are"."""
    steps = f"{size:,}" if size is not None else f"over {MAX_PROGRAM:,}"
    return (
        f"too complex for {ENGINE}: {steps} steps compiled, at most {MAX_PROGRAM:,}; use fewer "
        "or simpler patterns (large repeat counts cost most)"
    )


def _unsupported(text: str, what: str, *, hint: str = "") -> PatternError:
    hint = f" ({hint})" if hint else ""
    return PatternError(f"{text!r} uses {what}, which {ENGINE} does not support{hint}")


class _Translator:
    """A pattern Python accepted, in RE2's spelling; raises PatternError for what RE2 lacks.

    Python accepted the pattern, so its syntax is known good: a quantifier follows something
    to repeat, a set is closed, an escape is one Python knows.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.out: list[str] = []

    def run(self) -> str:
        text = self.text
        while self.i < len(text):
            char = text[self.i]
            if char == "\\":
                self._escape(in_set=False)
            elif char == "[":
                self._set()
            elif char == "(":
                self._group()
            elif char in "*+?":
                self.i += 1
                self._quantified(char)
            elif char == "{" and (quantifier := _QUANTIFIER.match(text, self.i)):
                self.i = quantifier.end()
                exact, low, high = quantifier.groups()
                # {,n} is {0,n} in Python, a literal in RE2
                self._quantified(f"{{{exact}}}" if exact else f"{{{low or 0},{high}}}")
            else:
                self.out.append(char)
                self.i += 1
        return "".join(self.out)

    def _quantified(self, quantifier: str) -> None:
        """A repeat just read: keep it and a lazy "?" after it; refuse a possessive "+"."""
        follower = self.text[self.i : self.i + 1]
        if follower == "+":
            raise _unsupported(self.text, f"a possessive quantifier ({quantifier}+)")
        if follower == "?":
            quantifier += "?"
            self.i += 1
        self.out.append(quantifier)

    def _group(self) -> None:
        text, start = self.text, self.i
        if not text.startswith("(?", start):
            self.out.append("(")
            self.i += 1
            return
        for opening, what in _GROUPS:
            if text.startswith(opening, start):
                raise _unsupported(text, what)
        if text.startswith("(?P<", start):
            # RE2's names are narrower than Python's (any identifier), and only the group's
            # number is read (extraction's group 1): it stays a group, unnamed.
            self.out.append("(")
            self.i = text.index(">", start) + 1
            return
        if text.startswith("(?:", start):
            self.out.append("(?:")
            self.i += 3
            return
        # Inline flags: (?flags) or (?flags-flags:...)
        end = start + 2
        while text[end] not in ":)":
            end += 1
        unknown = [flag for flag in text[start + 2 : end] if flag not in _FLAGS_RE2_HAS]
        if unknown:
            flag = unknown[0]
            raise _unsupported(
                text, f"the {_FLAG_NAMES[flag]} flag ({flag})", hint="it has the flags i, m and s"
            )
        self.out.append(text[start : end + 1])
        self.i = end + 1

    def _set(self) -> None:
        """From "[" to its "]"; a "[" inside is a literal in Python, so it is escaped."""
        text = self.text
        self.out.append("[")
        self.i += 1
        if text.startswith("^", self.i):
            self.out.append("^")
            self.i += 1
        if text.startswith("]", self.i):
            self.out.append(r"\]")
            self.i += 1
        while (char := text[self.i]) != "]":
            if char == "\\":
                self._escape(in_set=True)
            else:
                self.out.append(r"\[" if char == "[" else char)
                self.i += 1
        self.out.append("]")
        self.i += 1

    def _escape(self, *, in_set: bool) -> None:
        text, i = self.text, self.i
        char = text[i + 1]
        self.i = i + 2
        if char == "Z" and not in_set:
            self.out.append(r"\z")
        elif char == "b" and in_set:
            self.out.append(r"\x{8}")  # backspace, in a set
        elif char in "uU":
            digits = 4 if char == "u" else 8
            self.out.append(f"\\x{{{text[self.i : self.i + digits]}}}")
            self.i += digits
        elif char == "N":
            end = text.index("}", self.i)
            code = ord(unicodedata.lookup(text[self.i + 1 : end]))
            self.out.append(f"\\x{{{code:x}}}")
            self.i = end + 1
        elif char in "0123456789":  # ASCII only: to Python, an escaped "٣" is a plain "٣"
            self._number(char, in_set=in_set)
        elif not char.isascii():
            self.out.append(char)  # an escaped non-ASCII character is itself
        else:
            self.out.append("\\" + char)

    def _number(self, first: str, *, in_set: bool) -> None:
        """\\0, \\012, \\123: an octal escape; \\1 or \\12 outside a set: a backreference."""
        text, i = self.text, self.i
        if first == "0" or in_set:
            digits = first
            while len(digits) < 3 and text[i : i + 1] in _OCTAL:
                digits += text[i]
                i += 1
        elif len(text[i : i + 2]) == 2 and set(first + text[i : i + 2]) <= _OCTAL:
            digits = first + text[i : i + 2]  # three octal digits: a character, as in Python
            i += 2
        else:
            reference = first + (text[i] if text[i : i + 1].isdigit() else "")
            raise _unsupported(text, f"a backreference (\\{reference})")
        self.out.append(f"\\x{{{int(digits, 8):x}}}")
        self.i = i
