"""The structure the import contracts (pyproject.toml, `./run lint`) describe, checked from the
code itself: no import cycle anywhere, no import of our own modules hidden in a function, the
formatter configured rather than fought, and no application module over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crawlhub", "crawls", "proxies")
# Django's place for connecting signals: importing there is how apps are meant to do it.
ALLOWED_IN_FUNCTIONS = {("crawls/apps.py", "ready")}


def import_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in imports.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    found = import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert found == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}}) == []


def test_no_module_imports_itself_back_through_others():
    graph = grimp.build_graph(*PACKAGES)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert import_cycles(imports) == []


def _imports_in_functions(path: Path) -> list[tuple[str, int, str]]:
    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in PACKAGES:
                    found.append((function.name, node.lineno, name))
    return found


def test_no_import_of_our_own_modules_hides_in_a_function():
    hidden = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for function, line, name in _imports_in_functions(path):
                if (relative, function) not in ALLOWED_IN_FUNCTIONS:
                    hidden.append(f"{relative}:{line} imports {name} inside {function}()")
    assert hidden == []


# The formatter's layout is the tree's (pyproject.toml [tool.ruff.format]); a table that reads
# better aligned may keep its own, a handful in all.
MAX_FORMAT_SKIPS = 20


def test_the_formatter_is_fought_in_a_handful_of_places_at_most():
    skips = [
        f"{path.relative_to(ROOT)}:{number}"
        for top in (*PACKAGES, "tests", "bench")
        for path in sorted((ROOT / top).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip") or "# fmt: off" in line
    ]
    assert len(skips) <= MAX_FORMAT_SKIPS, skips


# An application module a reader takes in at once: past this, it is split along a seam a reader
# would name (issue: rooms a newcomer can find).
MAX_MODULE_LINES = 500


def test_no_application_module_is_over_500_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for top in PACKAGES
        for path in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in path.parts
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long
