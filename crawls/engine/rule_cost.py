"""Which extraction rules run in time linear in the page, whatever the page: those need no
process of their own to bound them (evaluator.py runs them where the page is, as every rule
ran before), and every other rule runs in the rule process.

Linear: each element, attribute or JSON value of the page is looked at a bounded number of
times, at a bounded cost (what a rule then reads of an element's text or markup is bounded by
extraction_page.MAX_READ).
- CSS: element names, classes, ids, attribute tests and :not() of those, joined by the child
  combinator (`>`) or in a group (`,`), with ::text or ::attr(name). Not the descendant (` `)
  or sibling (`~`, `+`) combinators, whose XPaths visit an element once per ancestor or
  sibling (`p ~ p ~ p` is cubic), nor pseudo-classes (:first-child counts siblings).
- JMESPath: fields, indexes, slices, projections, flattens, filters comparing values, and
  pipes, MAX_JMESPATH_NODES of them at most. Not functions (sort_by sorts, to_string writes
  out the whole input) nor multiselects ([@,@] is how a list grows tenfold a level).
- XPath and regular expressions: never (an XPath can be any program; RE2's search is linear
  until its DFA runs out of memory, then it is not).
"""

from __future__ import annotations

import jmespath
from cssselect import parse
from cssselect.parser import (
    Attrib,
    Class,
    CombinedSelector,
    Element,
    FunctionalPseudoElement,
    Hash,
    Negation,
)

from crawls.engine.extraction_rules import Rule

MAX_JMESPATH_NODES = 20
# Nodes of a parsed JMESPath expression that look at each value they are given once.
_LINEAR_JMESPATH = frozenset(
    {
        "field",
        "subexpression",
        "index",
        "index_expression",
        "slice",
        "current",
        "identity",
        "literal",
        "projection",
        "value_projection",
        "flatten",
        "filter_projection",
        "comparator",
        "and_expression",
        "or_expression",
        "not_expression",
        "pipe",
    }
)


def linear(rule: Rule) -> bool:
    """Whether running the rule takes time linear in the page (see the module docstring)."""
    try:
        if rule.kind == "css":
            return all(_linear_selector(selector) for selector in parse(rule.expr))
        if rule.kind == "json":
            return _linear_jmespath(jmespath.compile(rule.expr).parsed)
    except Exception:  # a rule stored before its checks: the rule process will say what
        return False
    return False


def _linear_selector(selector) -> bool:
    pseudo = selector.pseudo_element
    if isinstance(pseudo, FunctionalPseudoElement):
        pseudo = pseudo.name
    return pseudo in (None, "text", "attr") and _linear_css(selector.parsed_tree)


def _linear_css(tree) -> bool:
    if isinstance(tree, Element):
        return True
    if isinstance(tree, Class | Hash | Attrib):
        return _linear_css(tree.selector)
    if isinstance(tree, Negation):
        return _linear_css(tree.selector) and _linear_css(tree.subselector)
    if isinstance(tree, CombinedSelector):
        return (
            tree.combinator == ">"
            and _linear_css(tree.selector)
            and (_linear_css(tree.subselector))
        )
    return False


def _linear_jmespath(node: dict) -> bool:
    todo, count = [node], 0
    while todo:
        node = todo.pop()
        count += 1
        if count > MAX_JMESPATH_NODES or node.get("type") not in _LINEAR_JMESPATH:
            return False
        todo += [child for child in node.get("children", ()) if isinstance(child, dict)]
    return True
