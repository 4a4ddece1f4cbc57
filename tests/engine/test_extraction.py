"""Extraction rules: what each kind of rule takes from a page, every problem of the rules told at
once, and the bounds a page cannot get past (size, count, time), whatever it holds."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawls.engine import extraction, extraction_page, structured
from crawls.engine.extraction import (
    MAX_VALUE,
    MAX_VALUES,
    Extraction,
    Extractor,
    Rule,
    RulesError,
    check_rules,
    parse_rules,
    rules_to_json,
)
from crawls.engine.extraction_page import MAX_PAGE_BYTES, MAX_PARSED_BYTES
from crawls.engine.extraction_rules import GETS, KINDS
from crawls.engine.structured import structured_data
from tests.support.fuzzing import PROPERTY

# No database here: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


HTML = "text/html; charset=utf-8"
URL = "https://shop.example/kettles/blue?ref=home"
PAGE = b"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title> Blue   Kettle | Shop </title></head>
<body>
  <h1 class="name">Blue <em>Kettle</em>
     1.7 l</h1>
  <p class="price" data-currency="EUR">Price: 19.99 EUR</p>
  <ul id="links">
    <li><a href="/kettles/red">Red</a></li>
    <li><a href="/kettles/green" rel="next">Green</a></li>
    <li><a>no link</a></li>
  </ul>
  <img src="/img/blue.png" alt="">
  <p>SKU: KT-0042, also KT-0043</p>
</body></html>
"""


def extract(rules: list[dict], *, body: bytes = PAGE, content_type: str = HTML, url: str = URL):
    return Extractor(parse_rules(rules)).extract(url=url, body=body, content_type=content_type)


def one(kind: str, expr: str, **options) -> list[dict]:
    return [{"name": "field", "kind": kind, "expr": expr, **options}]


def problems_of(data: object) -> list[str]:
    with pytest.raises(RulesError) as caught:
        parse_rules(data)
    assert check_rules(data) == caught.value.problems
    return caught.value.problems


# -- what each kind of rule takes ------------------------------------------------------------


def test_a_css_rule_takes_an_elements_text_with_whitespace_collapsed():
    got = extract(one("css", "h1"))
    assert got == Extraction(fields={"field": "Blue Kettle 1.7 l"}, errors={})


def test_a_css_rule_takes_outer_html_and_attributes():
    got = extract(
        [
            {"name": "heading", "kind": "css", "expr": "h1 em", "get": "html"},
            {
                "name": "currency",
                "kind": "css",
                "expr": ".price",
                "get": "attr",
                "attr": "data-currency",
            },
            {"name": "missing", "kind": "css", "expr": ".price", "get": "attr", "attr": "lang"},
        ]
    )
    assert got.fields == {"heading": "<em>Kettle</em>", "currency": "EUR", "missing": None}
    assert got.errors == {}


def test_css_text_and_attr_pseudo_elements_give_the_value_stripped():
    got = extract(
        [
            {"name": "title", "kind": "css", "expr": "title::text"},
            {"name": "next", "kind": "css", "expr": "a[rel=next]::attr(href)"},
        ]
    )
    assert got.fields == {
        "title": "Blue   Kettle | Shop",
        "next": "https://shop.example/kettles/green",
    }


def test_a_url_attribute_is_made_absolute_against_the_page_and_its_base():
    """href, src and the other attributes that hold a URL give it absolute, as a link of the
    page would be followed; other attributes stay as they are."""
    got = extract(
        [
            {
                "name": "hrefs",
                "kind": "css",
                "expr": "a",
                "get": "attr",
                "attr": "href",
                "many": True,
            },
            {"name": "img", "kind": "xpath", "expr": "//img/@src"},
            {"name": "next", "kind": "css", "expr": "a[rel=next]::attr(href)"},
            {"name": "alt", "kind": "css", "expr": "img", "get": "attr", "attr": "alt"},
        ]
    )
    assert got.fields == {
        "hrefs": ["https://shop.example/kettles/red", "https://shop.example/kettles/green"],
        "img": "https://shop.example/img/blue.png",
        "next": "https://shop.example/kettles/green",
        "alt": None,
    }
    based = PAGE.replace(b"<head>", b'<head><base href="https://cdn.example/v2/">')
    got = extract(one("css", "img", get="attr", attr="src"), body=based)
    assert got.fields == {"field": "https://cdn.example/img/blue.png"}
    got = extract(
        one("css", "a", get="attr", attr="href"), body=PAGE.replace(b"/kettles/red", b"red")
    )
    assert got.fields == {"field": "https://shop.example/kettles/red"}


def test_many_gives_every_value_in_page_order_and_leaves_out_empty_ones():
    got = extract(
        [
            {"name": "hrefs", "kind": "css", "expr": "#links a::attr(href)", "many": True},
            {"name": "items", "kind": "css", "expr": "#links li", "many": True},
            {"name": "alts", "kind": "css", "expr": "img::attr(alt)", "many": True},
            {"name": "nothing", "kind": "css", "expr": "table td", "many": True},
        ]
    )
    assert got.fields == {
        "hrefs": ["https://shop.example/kettles/red", "https://shop.example/kettles/green"],
        "items": ["Red", "Green", "no link"],
        "alts": [],
        "nothing": [],
    }


def test_without_many_a_rule_gives_the_first_value_or_none():
    got = extract(
        [
            {"name": "first", "kind": "css", "expr": "#links a"},
            {"name": "nothing", "kind": "css", "expr": "table td"},
            # The first text node of the list is the whitespace before <li>: left out.
            {"name": "text", "kind": "xpath", "expr": "//ul/text() | //li/a/text()"},
        ]
    )
    assert got.fields == {"first": "Red", "nothing": None, "text": "Red"}


def test_an_xpath_rule_takes_elements_text_nodes_attributes_strings_and_numbers():
    got = extract(
        [
            {"name": "heading", "kind": "xpath", "expr": "//h1"},
            {"name": "own_text", "kind": "xpath", "expr": "//h1/text()"},
            {"name": "src", "kind": "xpath", "expr": "//img/@src"},
            {"name": "html", "kind": "xpath", "expr": "//li[2]", "get": "html"},
            {
                "name": "rel",
                "kind": "xpath",
                "expr": "//li/a",
                "get": "attr",
                "attr": "rel",
                "many": True,
            },
            {"name": "links", "kind": "xpath", "expr": "count(//a[@href])"},
            {"name": "ratio", "kind": "xpath", "expr": "count(//a[@href]) div 4"},
            {"name": "has_price", "kind": "xpath", "expr": "boolean(//p[@class='price'])"},
            {"name": "joined", "kind": "xpath", "expr": "concat(//li[1], '/', //li[2])"},
        ]
    )
    assert got.fields == {
        "heading": "Blue Kettle 1.7 l",
        "own_text": "Blue",
        "src": "https://shop.example/img/blue.png",
        "html": '<li><a href="/kettles/green" rel="next">Green</a></li>',
        "rel": ["next"],
        "links": "2",
        "ratio": "0.5",
        "has_price": "true",
        "joined": "Red/Green",
    }
    assert got.errors == {}


def test_a_regex_rule_gives_group_1_or_else_the_whole_match():
    got = extract(
        [
            {"name": "price", "kind": "regex", "expr": r"Price: (\d+\.\d+)"},
            {"name": "skus", "kind": "regex", "expr": r"KT-\d{4}", "many": True},
            {"name": "numbers", "kind": "regex", "expr": r"KT-(?P<n>\d+)", "many": True},
            {"name": "none", "kind": "regex", "expr": r"Discount: (\d+)"},
        ]
    )
    assert got.fields == {
        "price": "19.99",
        "skus": ["KT-0042", "KT-0043"],
        "numbers": ["0042", "0043"],
        "none": None,
    }


def test_a_regex_rule_reads_the_page_as_text_whatever_its_type():
    got = extract(one("regex", r"id=(\w+)"), body=b"user id=ab12;", content_type="text/plain")
    assert got.fields == {"field": "ab12"}


def test_a_rule_applies_only_to_pages_whose_url_its_url_pattern_matches():
    rules = [
        {"name": "title", "kind": "css", "expr": "title::text"},
        {"name": "kettle", "kind": "css", "expr": "h1 em", "url_pattern": r"/kettles/"},
        {"name": "toaster", "kind": "css", "expr": "h1 em", "url_pattern": r"(?i)/TOASTERS/"},
    ]
    got = extract(rules)
    assert got.fields == {"title": "Blue   Kettle | Shop", "kettle": "Kettle"}
    got = extract(rules, url="https://shop.example/toasters/1")
    assert got.fields == {"title": "Blue   Kettle | Shop", "toaster": "Kettle"}


# -- encodings ---------------------------------------------------------------------------------

LATIN1_PAGE = "<html><body><h1>Crème brûlée à 5 €</h1></body></html>"


def test_a_latin1_page_declared_in_the_content_type_is_decoded_with_it():
    body = LATIN1_PAGE.replace(" €", "").encode("latin-1")
    got = extract(one("css", "h1"), body=body, content_type="text/html; charset=ISO-8859-1")
    assert got.fields == {"field": "Crème brûlée à 5"}


def test_a_latin1_page_declared_in_a_meta_tag_is_decoded_with_it():
    body = LATIN1_PAGE.replace("<html>", '<html><head><meta charset="iso-8859-1"></head>')
    body = body.replace(" €", "").encode("latin-1")
    got = extract(
        [*one("css", "h1"), {"name": "r", "kind": "regex", "expr": r"(\S+) à"}],
        body=body,
        content_type="text/html",
    )
    assert got.fields == {"field": "Crème brûlée à 5", "r": "brûlée"}


def test_a_page_declaring_nothing_is_read_as_utf8_and_a_bom_wins_over_the_header():
    got = extract(one("css", "h1"), body=LATIN1_PAGE.encode(), content_type="text/html")
    assert got.fields == {"field": "Crème brûlée à 5 €"}
    body = "\ufeff".encode() + LATIN1_PAGE.encode()
    got = extract(one("css", "h1"), body=body, content_type="text/html; charset=iso-8859-1")
    assert got.fields == {"field": "Crème brûlée à 5 €"}
    body = LATIN1_PAGE.encode("utf-16")  # with its BOM
    got = extract(one("css", "h1"), body=body, content_type="text/html")
    assert got.fields == {"field": "Crème brûlée à 5 €"}


# -- JSON responses ------------------------------------------------------------------------------

JSON_BODY = json.dumps(
    {
        "product": {"name": "Kettle", "price": 19.99, "stock": 3, "tags": ["steel", "1.7 l"]},
        "offers": [{"seller": "A", "price": 21}, {"seller": "B", "price": 18.5}, {"seller": "C"}],
        "meta": {"nan": None, "ok": True},
    }
).encode()


def test_a_json_rule_takes_the_value_its_jmespath_finds():
    got = extract(
        [
            {"name": "name", "kind": "json", "expr": "product.name"},
            {"name": "price", "kind": "json", "expr": "product.price"},
            {"name": "stock", "kind": "json", "expr": "product.stock"},
            {"name": "product", "kind": "json", "expr": "product"},
            {"name": "prices", "kind": "json", "expr": "offers[*].price"},
            {"name": "cheapest", "kind": "json", "expr": "min_by(offers[?price], &price).seller"},
            {"name": "missing", "kind": "json", "expr": "product.colour"},
            {"name": "ok", "kind": "json", "expr": "meta.ok"},
        ],
        body=JSON_BODY,
        content_type="application/json",
    )
    assert got.fields == {
        "name": "Kettle",
        "price": 19.99,
        "stock": 3,
        "product": {"name": "Kettle", "price": 19.99, "stock": 3, "tags": ["steel", "1.7 l"]},
        "prices": [21, 18.5],
        "cheapest": "B",
        "missing": None,
        "ok": True,
    }
    assert got.errors == {}


def test_a_json_rule_with_many_gives_a_list_whatever_it_finds():
    got = extract(
        [
            {"name": "tags", "kind": "json", "expr": "product.tags", "many": True},
            {"name": "one", "kind": "json", "expr": "product.name", "many": True},
            {"name": "none", "kind": "json", "expr": "product.colour", "many": True},
            {"name": "sellers", "kind": "json", "expr": "offers[*].seller", "many": True},
        ],
        body=JSON_BODY,
        content_type="application/vnd.api+json",
    )
    assert got.fields == {
        "tags": ["steel", "1.7 l"],
        "one": ["Kettle"],
        "none": [],
        "sellers": ["A", "B", "C"],
    }


def test_a_json_body_is_read_whatever_its_content_type_says():
    got = extract(one("json", "product.stock"), body=JSON_BODY, content_type="text/plain")
    assert got.fields == {"field": 3}


def test_a_json_rule_on_a_body_that_is_not_json_says_so():
    got = extract(one("json", "a"))
    assert got.fields == {"field": None}
    assert got.errors == {"field": "the body is not JSON (text/html)"}
    got = extract(one("json", "a"), body=b'{"a": 1,', content_type="application/json")
    assert got.errors == {
        "field": "the body is not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 9 (char 8)"
    }


def test_json_values_are_json_a_database_takes():
    body = b'{"a": NaN, "b": [Infinity, 1e999, -Infinity], "c": "x\\u0000y\\ud800z", "\\u0000": 1}'
    got = extract(one("json", "@"), body=body, content_type="application/json")
    assert got.fields == {
        "field": {"a": None, "b": [None, None, None], "c": "x\ufffdy\ufffdz", "\ufffd": 1}
    }
    json.dumps(got.fields, allow_nan=False).encode()  # no NaN, every string encodable


# -- the rules' problems, all at once ------------------------------------------------------------


def test_every_problem_of_every_rule_is_told_at_once_each_naming_its_rule():
    data = [
        {"name": "title", "kind": "xpath", "expr": "//h1["},
        {"name": "price", "kind": "css", "expr": ".price["},
        {"name": "sku", "kind": "regex", "expr": r"(\w+)-\1"},
        {"name": "1x", "kind": "css", "expr": "h1"},
        {"name": "img", "kind": "css", "expr": "img", "get": "attr"},
        {"name": "price", "kind": "json", "expr": "offers[?price"},
        {"name": "stock", "kind": "regex", "expr": "(a", "url_pattern": "(?<=/)p"},
    ]
    assert problems_of(data) == [
        "Rule 1 (title): XPath '//h1[' is not valid: Invalid expression",
        "Rule 2 (price): CSS selector '.price[' is not valid: Expected ident or '*', got the end "
        "of the selector",
        "Rule 3 (sku): regular expression '(\\\\w+)-\\\\1' uses a backreference (\\1), which "
        "crawlhub's linear-time pattern engine does not support",
        "Rule 4: name '1x' must start with a letter",
        'Rule 5 (img): get is "attr" but no attribute is given',
        "Rule 6 (price): JMESPath expression 'offers[?price' is not valid: it ends too soon",
        "Rule 7 (stock): regular expression '(a' is not a valid regular expression: missing ), "
        "unterminated subpattern at position 0",
        "Rule 7 (stock): url_pattern '(?<=/)p' uses a lookbehind (?<=...), which crawlhub's "
        "linear-time pattern engine does not support",
        'Rules 2 and 6 are both named "price"',
    ]


def test_what_only_fails_when_run_is_found_when_the_rules_are_read():
    data = [
        {"name": "var", "kind": "xpath", "expr": "//a[@href = $url]"},
        {"name": "prefix", "kind": "xpath", "expr": "//re:test(., 'a')"},
        {"name": "func", "kind": "xpath", "expr": "//a[ends-with(@href, '/')]"},
        {"name": "jfunc", "kind": "json", "expr": "offers[0].nosuch(@)"},
        {"name": "arity", "kind": "json", "expr": "length(@, @)"},
        {"name": "pseudo", "kind": "css", "expr": "a::content"},
    ]
    assert problems_of(data) == [
        "Rule 1 (var): XPath '//a[@href = $url]' is not valid: it uses the variable $url, and "
        "rules have no variables",
        "Rule 2 (prefix): XPath \"//re:test(., 'a')\" is not valid: Invalid expression",
        "Rule 3 (func): XPath \"//a[ends-with(@href, '/')]\" is not valid: there is no function "
        "ends-with()",
        "Rule 4 (jfunc): JMESPath expression 'offers[0].nosuch(@)' is not valid: Unknown "
        "function: nosuch()",
        "Rule 5 (arity): JMESPath expression 'length(@, @)' is not valid: Expected 1 argument "
        "for function length(), received 2",
        "Rule 6 (pseudo): CSS selector 'a::content' is not valid: The pseudo-element ::content "
        "is unknown",
    ]


def test_wrong_types_and_missing_parts_are_each_told():
    data = [
        None,
        "h1",
        {},
        {
            "name": "a b",
            "kind": "CSS",
            "expr": 5,
            "get": "src",
            "many": "yes",
            "url_pattern": 7,
            "selector": "h1",
        },
        {"name": "x" * 65, "kind": "regex", "expr": "x", "get": "html"},
        {"name": "link", "kind": "css", "expr": "a", "attr": "href"},
        {"name": "alt", "kind": "css", "expr": "img", "get": "attr", "attr": "a b"},
        {"name": "", "kind": "css", "expr": "  "},
        {"name": "long", "kind": "css", "expr": "a" * 1001},
        {"name": 12, "kind": ["css"], "expr": None, "attr": {"a": 1}, "many": 1},
    ]
    assert problems_of(data) == [
        "Rule 1: must be an object with a name, kind and expr, not null",
        "Rule 2: must be an object with a name, kind and expr, not text",
        "Rule 3: name is missing",
        "Rule 3: kind is missing",
        "Rule 3: expr is missing",
        "Rule 4: name 'a b' may only hold the letters a-z and A-Z, digits, _ and -",
        "Rule 4: unknown key 'selector'; the keys are name, kind, expr, get, attr, many, "
        "url_pattern",
        "Rule 4: kind must be css, xpath, regex or json, not 'CSS'",
        "Rule 4: expr must be text, not a number",
        "Rule 4: get must be text, html or attr, not 'src'",
        "Rule 4: many must be true or false, not 'yes'",
        "Rule 4: url_pattern must be text, not a number",
        "Rule 5: name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... is 65 "
        "characters long; at most 64",
        'Rule 5: get is "html" but a regex rule has no get (its values are what it finds)',
        'Rule 6 (link): attr \'href\' is given but get is "text", not "attr"',
        "Rule 7 (alt): attr 'a b' is not an attribute name",
        "Rule 8: name is empty",
        "Rule 8: expr is empty",
        "Rule 9 (long): expr is 1,001 characters long; at most 1,000",
        "Rule 10: name must be text, not a number",
        "Rule 10: kind must be css, xpath, regex or json, not a list",
        "Rule 10: expr is missing",
        "Rule 10: attr must be text, not an object",
        "Rule 10: many must be true or false, not a number",
    ]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (None, "The rules must be a list of objects, not null"),
        ({"name": "a"}, "The rules must be a list of objects, not an object"),
        ("[]", "The rules must be a list of objects, not text"),
    ],
)
def test_rules_that_are_not_a_list_are_refused(data, problem):
    assert problems_of(data) == [problem]


def test_a_name_used_three_times_is_told_once():
    data = [{"name": "a", "kind": "css", "expr": "a"}] * 3 + [one("css", "a")[0]]
    assert problems_of(data) == ['Rules 1, 2 and 3 are all named "a"']


def test_51_rules_are_refused_50_are_fine():
    rules = [{"name": f"f{n}", "kind": "css", "expr": "a"} for n in range(51)]
    assert problems_of(rules) == ["There are 51 rules; a crawl has at most 50"]
    assert len(parse_rules(rules[:50])) == 50


def test_empty_optional_parts_mean_not_given():
    rules = parse_rules(
        [
            {
                "name": "t",
                "kind": "css",
                "expr": "h1",
                "get": None,
                "attr": "",
                "many": None,
                "url_pattern": "",
            }
        ]
    )
    assert rules == [Rule(name="t", kind="css", expr="h1")]


def test_rules_go_to_json_and_back_unchanged():
    rules = [
        Rule(name="t", kind="css", expr="h1"),
        Rule(name="src", kind="xpath", expr="//img", get="attr", attr="src", many=True),
        Rule(name="p", kind="regex", expr=r"(\d+)", url_pattern=r"/p/\d+$"),
        Rule(name="j", kind="json", expr="a.b", many=True),
    ]
    data = rules_to_json(rules)
    assert data[0] == {"name": "t", "kind": "css", "expr": "h1"}
    assert data[1] == {
        "name": "src",
        "kind": "xpath",
        "expr": "//img",
        "get": "attr",
        "attr": "src",
        "many": True,
    }
    assert parse_rules(json.loads(json.dumps(data))) == rules


def test_an_extractor_refuses_rules_parse_rules_would_refuse():
    with pytest.raises(RulesError) as caught:
        Extractor([Rule(name="t", kind="css", expr="h1["), Rule(name="t", kind="css", expr="a")])
    assert caught.value.problems == [
        "Rule 1 (t): CSS selector 'h1[' is not valid: Expected ident or '*', got the end of the "
        "selector",
        'Rules 1 and 2 are both named "t"',
    ]


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)
exprs = st.sampled_from(
    [
        "h1",
        "a::attr(href)",
        "//a[",
        "//a/@href",
        "count(//a)",
        "(a+)+$",
        r"(\d+)",
        "a.b",
        "a[",
        "[*].x",
        "",
        " ",
        ".x[",
        "$v",
        "nosuch(@)",
    ]
)
likely_rules = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["a", "b", "price", "1x"]),
        "kind": st.sampled_from(KINDS),
        "expr": exprs,
    },
    optional={
        "get": st.sampled_from(GETS),
        "attr": st.sampled_from(["href", "", "a b"]),
        "many": st.booleans(),
        "url_pattern": st.sampled_from(["/p/", "(?<=x)", ""]),
    },
)
junk_rules = st.dictionaries(
    st.sampled_from(["name", "kind", "expr", "get", "attr", "many", "url_pattern", "other"]),
    st.one_of(scalars, exprs, st.sampled_from([*KINDS, *GETS]), st.lists(scalars, max_size=2)),
)


@PROPERTY
@given(st.one_of(json_values, st.lists(likely_rules | junk_rules | scalars, max_size=5)))
def test_any_json_gives_rules_or_a_rules_error_never_another_exception(data):
    try:
        rules = parse_rules(data)
    except RulesError as exc:
        assert exc.problems and all(isinstance(problem, str) for problem in exc.problems)
        assert check_rules(data) == exc.problems
    else:
        assert parse_rules(rules_to_json(rules)) == rules
        Extractor(rules).extract(url=URL, body=PAGE, content_type=HTML)


# -- linear time ----------------------------------------------------------------------------------


def test_a_catastrophic_regex_runs_in_linear_time():
    body = b"a" * 100_000 + b"!"
    rules = [
        {"name": "first", "kind": "regex", "expr": "(a+)+$"},
        {"name": "all", "kind": "regex", "expr": "(a+)+$", "many": True},
        {"name": "near", "kind": "regex", "expr": "(a|aa)+!", "url_pattern": "(a+)+$"},
    ]
    extractor = Extractor(parse_rules(rules))
    started = time.process_time()
    got = extractor.extract(
        url="https://x.test/" + "a" * 5000 + "!", body=body, content_type="text/plain"
    )
    assert time.process_time() - started < 0.5
    assert got.fields == {"first": None, "all": []}  # the URL ends with "!": no "near"


def test_a_regex_whose_every_match_reads_to_the_end_is_stopped_in_time():
    # Each match of "(a)(.*z)?" searches on to the end of the line for a "z": 1,000 matches in
    # 2 MB of "a"s would take 1,000 searches of up to 2 MB each.
    body = b"a" * 2_000_000 + b"\n"
    started = time.process_time()
    got = extract(one("regex", "(a)(.*z)?", many=True), body=body, content_type="text/plain")
    assert time.process_time() - started < 1
    assert 0 < len(got.fields["field"]) < MAX_VALUES
    assert set(got.fields["field"]) == {"a"}
    assert got.errors == {
        "field": "the search took over 0.25 s on this page; the matches found by then are kept"
    }


# -- bounds ---------------------------------------------------------------------------------------


def test_a_value_is_cut_to_its_most_and_the_error_says_so():
    body = b"<html><body><p>" + b"word " * 5_000 + b"</p><p>short</p></body></html>"
    got = extract(one("css", "p", many=True), body=body)
    assert [len(value) for value in got.fields["field"]] == [MAX_VALUE, 5]
    assert got.fields["field"][0] == ("word " * 2_000)[:MAX_VALUE]
    assert got.errors == {"field": "a value was cut to 10,000 characters"}


def test_a_many_rule_keeps_its_first_1000_values():
    body = b"<ul>" + b"".join(b"<li>%d</li>" % n for n in range(1_500)) + b"</ul>"
    got = extract(
        [
            *one("css", "li", many=True),
            {"name": "r", "kind": "regex", "expr": r"<li>(\d+)", "many": True},
        ],
        body=body,
    )
    assert got.fields["field"] == [str(n) for n in range(MAX_VALUES)]
    assert got.fields["r"] == [str(n) for n in range(MAX_VALUES)]
    assert got.errors == {
        "field": "more than 1,000 values; the first 1,000 are kept",
        "r": "more than 1,000 values; the first 1,000 are kept",
    }


def test_a_page_yields_at_most_256_kb_of_values_the_rest_left_out_with_an_error():
    # 40 paragraphs of 9,000 characters: 29 fit in 256 KB.
    body = b"<div>" + b"".join(b"<p>%s</p>" % (b"x" * 9_000) for _ in range(40)) + b"</div>"
    rules = [
        {"name": "ps", "kind": "css", "expr": "p", "many": True},
        {"name": "again", "kind": "css", "expr": "p"},
        {"name": "tiny", "kind": "css", "expr": "p::text"},
    ]
    got = extract(rules, body=body)
    assert len(got.fields["ps"]) == MAX_PAGE_BYTES // 9_000 == 29
    assert got.fields["again"] is None and got.fields["tiny"] is None
    assert got.errors == {
        "ps": "the page's values reached 256 KB; the rest are left out",
        "again": "the page's values reached 256 KB; the rest are left out",
        "tiny": "the page's values reached 256 KB; the rest are left out",
    }


def test_a_json_value_too_long_to_keep_is_left_out_and_a_long_string_cut():
    body = json.dumps({"big": list(range(5_000)), "text": "y" * 20_000}).encode()
    got = extract(
        [
            {"name": "big", "kind": "json", "expr": "big"},
            {"name": "text", "kind": "json", "expr": "text"},
            {"name": "small", "kind": "json", "expr": "big[:3]"},
        ],
        body=body,
        content_type="application/json",
    )
    assert got.fields == {"big": None, "text": "y" * MAX_VALUE, "small": [0, 1, 2]}
    assert got.errors == {
        "big": "a value is 28,890 characters of JSON, more than 10,000; it is left out",
        "text": "a value was cut to 10,000 characters",
    }


def test_deeply_nested_elements_stop_a_rule_once_the_page_has_been_read_enough():
    # Each <div>'s text is nearly the whole page: 1,000 of them would read 1,000 times 300 KB.
    body = b"<div>" * 1_000 + b"z" * 300_000 + b"</div>" * 1_000
    started = time.process_time()
    got = extract(one("css", "div", many=True), body=body)
    assert time.process_time() - started < 2
    assert got.errors["field"].startswith("the page's values reached 256 KB")


def test_reading_stops_at_its_most_per_page():
    body = b"<div>" * 200 + b" " * 400_000 + b"x" + b"</div>" * 200
    got = extract(one("css", "div", many=True), body=body)
    # 80 values of 400,001 characters read, 32,000,000 at most: 80 made, then the stop.
    assert got.fields["field"] == ["x"] * 79
    assert got.errors == {
        "field": "the rules read 32,000,000 characters of this page's text to make values; "
        "the rest are left out"
    }


# -- what a page can be ----------------------------------------------------------------------------


def test_a_rule_failing_on_a_page_is_its_error_and_the_others_still_give_values():
    body = json.dumps({"items": ["a", "b"], "name": "Kettle"}).encode()
    got = extract(
        [
            {"name": "total", "kind": "json", "expr": "sum(items)"},
            {"name": "name", "kind": "json", "expr": "name"},
            {"name": "heading", "kind": "css", "expr": "h1"},
            {"name": "quoted", "kind": "regex", "expr": '"(K\\w+)"'},
        ],
        body=body,
        content_type="application/json",
    )
    assert got.fields == {"total": None, "name": "Kettle", "heading": None, "quoted": "Kettle"}
    assert got.errors == {
        "total": "JMESPath evaluation error: In function sum(), invalid type for value: a, "
        "expected one of: ['array-number'], received: \"str\"",
        "heading": "the page is not HTML or XML (application/json)",
    }


def test_an_unexpected_exception_in_a_rule_is_that_rules_error(monkeypatch):
    def broken(node):
        raise RuntimeError("lxml broke")

    monkeypatch.setattr(extraction, "_TEXT_OF", broken)
    got = extract([*one("css", "h1"), {"name": "src", "kind": "css", "expr": "img::attr(src)"}])
    assert got.fields == {"field": None, "src": "https://shop.example/img/blue.png"}
    assert got.errors == {"field": "the rule failed on this page: RuntimeError('lxml broke')"}


def test_the_tree_is_built_once_and_only_for_a_rule_that_needs_it(monkeypatch):
    built = []
    selector = extraction_page.Selector
    monkeypatch.setattr(extraction_page, "Selector", lambda **kw: built.append(1) or selector(**kw))
    rules = [
        {"name": "a", "kind": "css", "expr": "h1"},
        {"name": "b", "kind": "xpath", "expr": "//title"},
        {"name": "c", "kind": "regex", "expr": "Price: (\\S+)"},
        {"name": "d", "kind": "css", "expr": "em", "url_pattern": "/toasters/"},
    ]
    extractor = Extractor(parse_rules(rules))
    extractor.extract(url=URL, body=PAGE, content_type=HTML)
    assert built == [1]
    extractor.extract(url="https://shop.example/toasters/", body=PAGE, content_type=HTML)
    assert built == [1, 1]
    regex_only = Extractor(parse_rules(rules[2:]))
    assert regex_only.extract(url=URL, body=PAGE, content_type=HTML).fields == {"c": "19.99"}
    assert built == [1, 1]


@pytest.mark.parametrize(
    ("body", "content_type", "error"),
    [
        (b"\x89PNG\r\n\x1a\n\x00", "image/png", "the page is not HTML or XML (image/png)"),
        (b'{"a": "<b>"}', "application/json", "the page is not HTML or XML (application/json)"),
        (b"plain words", "", "the page is not HTML or XML (no content type)"),
        (b"", "text/html", "the page is empty"),
        (b"   \n", "text/html", "the page is empty"),
    ],
)
def test_a_css_rule_on_a_page_that_is_not_html_says_why(body, content_type, error):
    got = extract(one("css", "h1"), body=body, content_type=content_type)
    assert got == Extraction(fields={"field": None}, errors={"field": error})


def test_a_page_over_the_most_parsed_gets_an_error_not_a_tree():
    body = b"<p>" + b"x" * MAX_PARSED_BYTES + b"</p>"
    got = extract(one("css", "p"), body=body)
    assert got.errors == {"field": "the page is 8.0 MB; selectors run on pages of at most 8.0 MB"}


def test_broken_html_is_read_as_a_browser_would_recover_it():
    body = b"<html><body><div><p>one<p>two</div><b><i>three</b></i><table><td>four"
    got = extract(
        [
            {"name": "ps", "kind": "css", "expr": "p", "many": True},
            {"name": "cell", "kind": "css", "expr": "td"},
            {"name": "i", "kind": "xpath", "expr": "//i"},
        ],
        body=body,
        content_type="text/html",
    )
    assert got.fields == {"ps": ["one", "two"], "cell": "four", "i": "three"}


def test_an_html_page_without_a_content_type_is_recognised_by_its_start():
    got = extract(one("css", "title::text"), body=PAGE, content_type="")
    assert got.fields == {"field": "Blue   Kettle | Shop"}


def test_css_on_an_xml_page_reads_names_as_written():
    body = b'<?xml version="1.0"?><feed><Item id="1"><Title>One</Title></Item><Item id="2"/></feed>'
    got = extract(
        [
            {"name": "ids", "kind": "css", "expr": "Item::attr(id)", "many": True},
            {"name": "lower", "kind": "css", "expr": "item", "many": True},
            {"name": "xml", "kind": "xpath", "expr": "//Item[1]", "get": "html"},
        ],
        body=body,
        content_type="application/atom+xml",
    )
    assert got.fields == {
        "ids": ["1", "2"],
        "lower": [],
        "xml": '<Item id="1"><Title>One</Title></Item>',
    }


def test_an_xml_page_is_read_without_its_namespaces():
    body = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:dc="http://purl.org/dc/elements/1.1/">
  <entry><title>First</title><dc:creator>Ada</dc:creator></entry>
  <entry><title>Second</title></entry>
</feed>"""
    got = extract(
        [
            {"name": "titles", "kind": "css", "expr": "entry > title", "many": True},
            {"name": "creator", "kind": "xpath", "expr": "//entry/creator"},
        ],
        body=body,
        content_type="application/atom+xml",
    )
    assert got.fields == {"titles": ["First", "Second"], "creator": "Ada"}


def test_an_xml_page_never_loads_an_entity_it_declares(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    body = (
        f'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY s SYSTEM "file://{secret}">]><r><a>&s;</a></r>'
    ).encode()
    got = extract(one("xpath", "string(//r)"), body=body, content_type="application/xml")
    assert "SECRET" not in json.dumps(got.fields)


page_bodies = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.sampled_from(
            [
                b"<",
                b">",
                b"</p>",
                b"<p class=x>",
                b"&amp;",
                b"\x00",
                b"\xff",
                b"<?xml ",
                b"{",
                b'"a":',
                b"1",
                b"]",
                b"<meta charset=utf-16>",
                b"\xef\xbb\xbf",
                b"\xfe\xff",
                b"<![CDATA[",
                b"<!--",
                b"x",
            ]
        ),
        max_size=30,
    ).map(b"".join),
)
content_types = st.sampled_from(
    [
        "text/html",
        "text/html; charset=utf-16",
        "text/html; charset=nonsense",
        "application/json",
        "application/xml",
        "image/png",
        "",
        "text/plain; charset=latin-1",
    ]
)
EVERY_KIND = parse_rules(
    [
        {"name": "css", "kind": "css", "expr": "p", "many": True},
        {"name": "attr", "kind": "css", "expr": "p", "get": "attr", "attr": "class"},
        {"name": "html", "kind": "xpath", "expr": "//*", "get": "html", "many": True},
        {"name": "text", "kind": "xpath", "expr": "//text()", "many": True},
        {"name": "number", "kind": "xpath", "expr": "count(//*) div 0"},
        {"name": "regex", "kind": "regex", "expr": "(.)", "many": True},
        {"name": "json", "kind": "json", "expr": "a", "many": True},
        {"name": "all", "kind": "json", "expr": "@"},
    ]
)


@pytest.mark.slow
@PROPERTY
@given(body=page_bodies, content_type=content_types)
def test_any_page_gives_json_values_or_errors_never_an_exception(body, content_type):
    got = Extractor(EVERY_KIND).extract(url=URL, body=body, content_type=content_type)
    assert set(got.fields) == {rule.name for rule in EVERY_KIND}
    assert set(got.errors) <= set(got.fields)
    json.dumps(got.fields, allow_nan=False).encode()
    data = structured_data(url=URL, body=body, content_type=content_type)
    assert data is None or json.dumps(data, allow_nan=False).encode()


# -- structured data -----------------------------------------------------------------------------

STRUCTURED_PAGE = b"""<!DOCTYPE html><html><head>
<meta property="og:title" content="Blue Kettle"><meta property="og:type" content="product">
<script type="application/ld+json">
{"@context": "https://schema.org", "@type": "Product", "name": "Kettle",
 "offers": {"@type": "Offer", "price": "19.99", "priceCurrency": "EUR"}}
</script></head>
<body><div itemscope itemtype="https://schema.org/Person"><span itemprop="name">Ada</span></div>
</body></html>"""


def test_structured_data_has_json_ld_microdata_and_opengraph():
    assert structured_data(url=URL, body=STRUCTURED_PAGE, content_type=HTML) == {
        "json-ld": [
            {
                "@context": "https://schema.org",
                "@type": "Product",
                "name": "Kettle",
                "offers": {"@type": "Offer", "price": "19.99", "priceCurrency": "EUR"},
            }
        ],
        "microdata": [{"@context": "https://schema.org", "@type": "Person", "name": "Ada"}],
        "opengraph": [
            {"@context": {"og": "http://ogp.me/ns#"}, "@type": "product", "og:title": "Blue Kettle"}
        ],
    }


def test_structured_data_is_none_for_what_is_not_html_or_declares_nothing():
    assert structured_data(url=URL, body=JSON_BODY, content_type="application/json") is None
    assert structured_data(url=URL, body=PAGE, content_type=HTML) is None
    assert structured_data(url=URL, body=b"", content_type=HTML) is None
    big = STRUCTURED_PAGE + b" " * structured.MAX_STRUCTURED_BODY
    assert structured_data(url=URL, body=big, content_type=HTML) is None
    broken = STRUCTURED_PAGE.replace(b'"name": "Kettle",', b'"name": "Kettle",,')
    assert set(structured_data(url=URL, body=broken, content_type=HTML)) == {
        "microdata",
        "opengraph",
    }


def test_structured_data_keeps_at_most_256_kb_and_says_how_many_items_it_left_out():
    item = b'<script type="application/ld+json">{"@type": "Thing", "name": "%s"}</script>'
    scripts = b"".join(item % (b"n" * 100_000) for _ in range(4))
    data = structured_data(
        url=URL, body=b"<html><head>" + scripts + b"</head></html>", content_type=HTML
    )
    assert [len(thing["name"]) for thing in data["json-ld"]] == [100_000, 100_000]
    assert data["dropped"] == 2
    assert len(json.dumps(data).encode()) <= structured.MAX_STRUCTURED_BYTES + 100
