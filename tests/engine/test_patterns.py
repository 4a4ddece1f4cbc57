"""Include and exclude patterns: what Python's re.search says, in time linear in the URL; what
the linear-time engine cannot do is refused by name; size limits hold before anything compiles.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from crawls.engine.patterns import (
    MAX_LENGTH,
    MAX_NESTING,
    MAX_PROGRAM,
    PatternError,
    compile_extractor,
    compile_pattern,
    match_any,
)
from crawls.engine.scope import MAX_PATTERNS, Scope, ScopeError, compile_patterns

# No database here: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


URLS = [
    "https://example.com/",
    "https://example.com/products/42",
    "https://example.com/product/42?color=red",
    "https://www.example.com/blog/2024/05/hello-world",
    "https://example.com/list?page=2&sort=asc",
    "https://example.com/list?sort=asc&page=17",
    "http://example.com/files/report.PDF",
    "https://example.com/files/report.pdf",
    "https://example.com/files/report.pdf?download=1",
    "https://example.com/wp-admin/options.php",
    "https://example.com/post?replytocom=7",
    "https://shop.example.net/cart/checkout",
    "https://example.com/tag/a%20b/",
    "https://example.com/%E2%98%83/snow",
    "https://example.com/a_b-c.d~e",
    "https://example.com/UPPER/lower/MiXeD",
    "https://example.com/" + "a" * 40 + "!",
    "https://example.com/" + "a" * 40,
    "https://example.com/item/123456/reviews#top",
    "https://example.com/search?q=%5B%5D&x=",
    "https://xn--bcher-kva.example/stra%C3%9Fe",
    "https://example.com:8443/port",
    "https://example.com/2024-05-01/",
    "https://example.com/[brackets]/:colon",
    "https://example.com/end/",
]

# What people write in include/exclude lists, and spellings Python and RE2 read differently.
PATTERNS = [
    r"/products?/",
    r"[?&]page=\d+",
    r"\.pdf$",
    r"(?i)\.pdf$",
    r"^https://",
    r"^http://",
    r"example\.com/blog/",
    r"/blog/\d{4}/\d{2}/",
    r"^https?://(www\.)?example\.com/",
    r"/(wp-admin|wp-login)",
    r"[?&]replytocom=",
    r"\?",
    r"/tag/",
    r"%[0-9A-F]{2}",
    r"/$",
    r"^[^?]*$",
    r"\bcart\b",
    r"\Bxample",
    r"\w+-\w+",
    r"\s",
    r"\S+",
    r"\D{5}",
    r"(?:a|b)+!",
    r"a{40}",
    r"a{41}",
    r"a{,3}b",
    r"a{2,}$",
    r"a{,}!",
    r"[[:alpha:]]",
    r"[[]",
    r"[]]",
    r"[^]a-z/:.]",
    r"[\]\[]",
    r"\Z",
    r"/\Z",
    r"(?P<year>\d{4})-(?P<m>\d\d)",
    r"(?i:UPPER)/lower",
    r"(?i)mixed",
    r"(?s).",
    r"(?m)^https",
    r"\x2e",
    r"\056pdf",
    "\\u002epdf",
    r"\N{FULL STOP}pdf",
    r"[\b]",
    r"\#|top",
    r".*",
    r"^$",
    r"é",
    r"\é",
    r"example\.(com|net)\b",
    r"(\d+)/reviews",
    r"\d{6}/",
    r":\d+/",
    r"\[brackets\]",
    r"\Ahttps",
    r"a*?!",
    r"a+?$",
]


# Python warns that "[[" may mean a nested set one day; today it is a "[", and so it is on RE2.
NESTED_SET_WARNING = pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")


@NESTED_SET_WARNING
@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_matches_the_urls_python_re_search_matches(pattern):
    compiled = compile_pattern(pattern)
    assert compiled.pattern == pattern
    for url in URLS:
        assert compiled.search(url) == bool(re.search(pattern, url)), (pattern, url)


def test_patterns_searched_together_match_where_any_of_them_does():
    group = [r"(?i)\.PDF$", r"^http://", r"(?P<n>\d+)/reviews", r"(?P<n>x)?/cart/"]
    together = match_any([compile_pattern(p) for p in group])
    for url in URLS:
        expected = any(re.search(p, url) for p in group)
        assert together.search(url) == expected, url
    # A flag at the start of one pattern covers that pattern only.
    assert not match_any([compile_pattern(r"(?i)Q"), compile_pattern("upper")]).search(
        "https://example.com/UPPER"
    )
    assert match_any([]) is None


def test_the_backtracking_attack_takes_microseconds():
    """The finding: `(a+)+$` against 40 "a"s and a "!" kept a worker busy for minutes."""
    scope = Scope(
        seeds=["https://example.com/"], allowed_domains=[], include=["(a+)+$"], exclude=["(x+x+)+y"]
    )
    urls = ["https://example.com/" + "a" * n + "!" for n in (25, 40, 1000)]
    urls.append("https://example.com/" + "x" * 7000)
    # This thread's CPU time, not the clock: a busy machine's other processes do not count.
    started = time.thread_time()
    assert [scope.allows(url) for url in urls] == [False, False, False, False]
    assert scope.allows("https://example.com/" + "a" * 40)
    assert time.thread_time() - started < 1.0


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", r"a backreference (\1)"),
        (r"(?P<n>a)(?P=n)", "a backreference (?P=name)"),
        (r"/(?=docs)", "a lookahead (?=...)"),
        (r"/(?!private)", "a negative lookahead (?!...)"),
        (r"(?<=/)docs", "a lookbehind (?<=...)"),
        (r"(?<!\.)pdf", "a negative lookbehind (?<!...)"),
        (r"(?>a+)b", "an atomic group (?>...)"),
        (r"a++b", "a possessive quantifier (++)"),
        (r"a{2,3}+b", "a possessive quantifier ({2,3}+)"),
        (r"(a)?(?(1)b|c)", "a conditional group (?(...)...)"),
        (r"(?#why)docs", "a comment (?#...)"),
        (r"(?x) docs", "the verbose flag (x)"),
        (r"(?a)\w", "the ASCII flag (a)"),
    ],
)
def test_what_the_engine_cannot_do_is_refused_by_name(pattern, construct):
    with pytest.raises(ScopeError) as info:
        compile_patterns([r"/ok/", pattern], "include_patterns")
    assert str(info.value).startswith(
        f"include_patterns: line 2: {pattern!r} uses {construct}, which crawlhub's linear-time "
        "pattern engine does not support"
    ), str(info.value)


def test_a_pattern_python_refuses_gets_pythons_message():
    with pytest.raises(PatternError, match=r"^'a\(' is not a valid regular expression: missing \)"):
        compile_pattern("a(")


def test_a_megabyte_pattern_is_refused_before_it_is_compiled():
    started = time.thread_time()  # CPU time: a busy machine's other processes do not count
    with pytest.raises(ScopeError) as info:
        compile_patterns(["x" * 1024 * 1024], "exclude_patterns")
    assert str(info.value) == (
        f"exclude_patterns: line 1: {'x' * 40!r}... is 1,048,576 characters long; a pattern "
        f"has at most {MAX_LENGTH:,}"
    )
    assert time.thread_time() - started < 0.5


@pytest.mark.parametrize("depth", [5000, MAX_NESTING + 1])
def test_deeply_nested_groups_are_refused_not_a_recursion_error(depth):
    pattern = "(" * depth + "a" + ")" * depth
    with pytest.raises(ScopeError) as info:
        compile_patterns([pattern], "include_patterns")
    message = str(info.value)
    assert message.startswith("include_patterns: line 1: '((((")
    if len(pattern) > MAX_LENGTH:
        assert message.endswith(f"is {len(pattern):,} characters long; a pattern has at most 1,000")
    else:
        assert message.endswith(f"nests groups {depth} deep; at most {MAX_NESTING} levels")


def test_more_than_the_most_patterns_is_refused():
    lines = [f"/section-{n}/" for n in range(MAX_PATTERNS + 1)] + ["", "  "]
    with pytest.raises(ScopeError) as info:
        compile_patterns(lines, "exclude_patterns")
    assert str(info.value) == f"exclude_patterns: {MAX_PATTERNS + 1} patterns; at most 100"
    assert len(compile_patterns(lines[:MAX_PATTERNS], "exclude_patterns")) == MAX_PATTERNS


def test_more_than_1000_repetitions_are_refused_nested_ones_multiplied():
    for pattern in ("a{1001}", "(a{100}){11}"):
        with pytest.raises(PatternError, match=r"repeats something more than 1,000 times"):
            compile_pattern(pattern)
    assert compile_pattern("(a{10}){100}").search("a" * 1000)


def test_patterns_too_complex_together_are_refused():
    heavy = r"(?:[a-z0-9]{10}[^/]{10}){45}"  # about 4,500 steps compiled
    compile_patterns([heavy + str(n) for n in range(4)], "include_patterns")
    with pytest.raises(ScopeError) as info:
        compile_patterns([heavy + str(n) for n in range(5)], "include_patterns")
    assert str(info.value).startswith(
        "include_patterns: the 5 patterns together are too complex for crawlhub's linear-time "
        "pattern engine: "
    )
    assert f"at most {MAX_PROGRAM:,}" in str(info.value)


def test_a_hundred_ordinary_patterns_are_well_within_the_limits():
    lines = [
        rf"^https?://(www\.)?site{n}\.com/(products|blog/\d{{4}})/[\w-]+(\?page=\d+)?$"
        for n in range(MAX_PATTERNS)
    ]
    scope = Scope(
        seeds=["https://site7.com/"], allowed_domains=["site7.com"], include=lines, exclude=[]
    )
    assert scope.allows("https://www.site7.com/blog/2024/hello?page=2")
    assert not scope.allows("https://site7.com/about")


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    """A pattern from the pieces URL patterns are made of, nested at most twice."""
    atoms = [
        "a",
        "b",
        "/",
        r"\.",
        "-",
        r"\?",
        "=",
        "[ab]",
        "[^a/]",
        r"\d",
        r"\w",
        r"\W",
        ".",
        "[a-c]",
        "[[]",
        r"\x61",
        r"\u0062",
        r"\141",
    ]
    pieces = []
    for _ in range(rng.randint(1, 4)):
        if depth < 2 and rng.random() < 0.25:
            inner = "|".join(random_pattern(rng, depth + 1) for _ in range(rng.randint(1, 2)))
            atom = rng.choice(["(", "(?:", "(?P<g>", "(?i:"]) + inner + ")"
            atom = atom.replace("(?P<g>", f"(?P<g{rng.randrange(10**6)}>")
        else:
            atom = rng.choice(atoms)
        quantifier = rng.choice(["", "", "*", "+", "?", "{2}", "{1,3}", "{,2}", "{2,}", "*?"])
        pieces.append(atom + quantifier)
    anchors = rng.choice([("", ""), ("^", ""), ("", "$"), (r"\A", r"\Z"), (r"\b", r"\b")])
    return anchors[0] + "".join(pieces) + anchors[1]


@NESTED_SET_WARNING
def test_random_patterns_match_as_python_re_search_does():
    rng = random.Random(12)
    urls = [
        "http://x/" + "".join(rng.choice("ab/.-?=c1A[") for _ in range(rng.randint(0, 12)))
        for _ in range(40)
    ]
    checked = 0
    for _ in range(600):
        pattern = random_pattern(rng)
        try:
            python = re.compile(pattern)
        except re.error:
            continue
        compiled = compile_pattern(pattern)
        for url in urls:
            assert compiled.search(url) == bool(python.search(url)), (pattern, url)
        checked += 1
    assert checked > 400


def python_values(python: re.Pattern, text: str) -> list[str]:
    """What an extraction rule takes of each match: group 1 if there are groups, else the whole
    match (re.findall gives tuples for several groups)."""
    return [found[0] if isinstance(found, tuple) else found for found in python.findall(text)]


@NESTED_SET_WARNING
def test_random_patterns_extract_the_values_python_re_findall_finds():
    rng = random.Random(13)
    texts = [
        "".join(rng.choice("ab/.-?=c1A[ ") for _ in range(rng.randint(0, 16))) for _ in range(40)
    ]
    checked = 0
    for _ in range(600):
        pattern = random_pattern(rng)
        try:
            python = re.compile(pattern)
        except re.error:
            continue
        compiled = compile_extractor(pattern)
        for text in texts:
            values = python_values(python, text)
            if "" in values:
                # Python and RE2 differ on empty values: after an empty match Python tries a
                # longer one at the same place, RE2 moves on; a repeated group's last, empty
                # round is "" to Python, RE2 keeps the round before.
                continue
            assert compiled.findall(text) == values, (pattern, text)
            assert compiled.findall(text.encode()) == [value.encode() for value in values]
            checked += 1
    assert checked > 4000


def test_an_extracting_pattern_numbers_named_groups_as_python_does():
    compiled = compile_extractor(r"(?P<currency>[A-Z]{3}) (?P<amount>\d+)")
    assert compiled.findall("EUR 12, USD 7") == ["EUR", "USD"]
    assert compiled.search("no price") is None
    assert compile_extractor(r"x|(a)?b").findall("xb") == ["", ""]  # group 1 did not take part
    assert compile_extractor(r"\d+").findall("1 2 3", limit=2) == ["1", "2"]


def test_an_extracting_pattern_is_refused_as_a_url_pattern_is():
    with pytest.raises(PatternError, match="a backreference"):
        compile_extractor(r"(a)\1")
    with pytest.raises(PatternError, match="characters long"):
        compile_extractor("a" * (MAX_LENGTH + 1))
