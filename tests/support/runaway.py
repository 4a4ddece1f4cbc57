"""Extraction rules that run away, and pages they run away on: the attacks of
tests/engine/test_rules_that_run_away.py and tests/end_to_end/test_runaway_rules.py."""

from crawls.engine.extraction_rules import MAX_EXPR

# Ten references to what it is given, then flattened: ten times as many items.
LEVEL = "[" + ",".join(["@"] * 10) + "][]"
TENFOLD = "|".join([LEVEL] * 8)  # 191 characters, 10^8 items from {}
LONGEST = "|".join([LEVEL] * (MAX_EXPR // (len(LEVEL) + 1)))  # 41 levels in 1,000 characters
# Each item of the page against every item of the page, for every item: n^3.
CUBIC_XPATH = "//p[count(//p[count(preceding::p) < 3]) > 0]"
SIBLINGS_CSS = "p ~ p ~ p"  # descendant-or-self::p/following-sibling::p/following-sibling::p
PARAGRAPHS = (
    b"<html><head><title>Big</title></head><body><h1>Heading</h1>"
    + (b"<p>x</p>" * 20_000)
    + b"</body></html>"
)
# RE2's DFA runs out of memory on this one: its first search is quick, every later one (on
# the next page) falls back to an engine that takes 15 s for 1 MB.
SLOW_REGEX = r"(?s)(.{1,50}){1,20}z"
WORDS = b"abcdefghij " * 100_000
