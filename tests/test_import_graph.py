"""The import graph of ``src/merkat``: no cycle, and no import across the layer rules.

The graph is read with :mod:`ast`, never by importing: every ``import`` and ``from ... import``
of a module counts, at the top level, deferred inside a function, or under ``TYPE_CHECKING``
(a cycle hidden by a deferred import is still a cycle: the two modules cannot be understood,
tested or moved apart). Relative imports are resolved; ``from pkg import name`` where
``pkg/name.py`` (or ``pkg/name/``) exists is an import of that submodule, otherwise of ``pkg``.
Imports by string (``importlib``, the CLI's ``Noun("module:attr")`` table) are plugin points,
not edges.

- **Cycles**: the strongly connected components of the module graph (Tarjan); each one with
  more than one module fails, named by its modules and one closed path through them with the
  line of each import.
- **Layers**: the table of docs/architecture.md ("Layers: who may import whom") is the one
  source of the rules, parsed here: a module of package ``A`` may import a module of package
  ``B`` only when ``B`` is ``A`` or is listed in ``A``'s row. A row may list only packages of
  earlier rows (the rules themselves are a stack), and every top-level module and package of
  ``src/merkat`` must have a row.

``ALLOWED_CYCLES`` and ``ALLOWED_CROSSINGS`` name the import edges still being removed by
another engineer (each entry names its owner); an entry that no longer matches an edge on a
cycle (or an import across the rules) fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "merkat"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
HEADING = "## Layers: who may import whom"

# Import edges (importer, imported) tolerated on a cycle until their owner removes them.
# Must be empty by the end of issue 27.
ALLOWED_CYCLES: dict[tuple[str, str], str] = {}

# Imports (importer, imported) across the layer rules, tolerated until their owner removes them.
ALLOWED_CROSSINGS: dict[tuple[str, str], str] = {}


# --- the checker ------------------------------------------------------------------------


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module under ``root`` (the directory of ``package``): dotted name -> (file,
    whether it is a package's ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        init = parts[-1] == "__init__"
        out[".".join(parts[:-1] if init else parts)] = (path, init)
    return out


def _known(name: str, known: Mapping[str, object]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (None if none is)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """importer -> {imported module: line of its first import}, for the package's own
    modules only (the module docstring says what counts)."""
    mods = modules(root, package)
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for name, (path, init) in mods.items():
        here = name.split(".") if init else name.split(".")[:-1]
        edges = graph[name]

        def add(target: str | None, line: int, edges: dict[str, int] = edges,
                name: str = name) -> None:
            if target is not None and target != name:
                edges.setdefault(target, line)

        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(_known(alias.name, mods), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    add(sub if sub in mods else _known(source, mods), node.lineno)
    return graph


def components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan,
    iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def cycle_path(graph: Mapping[str, Mapping[str, int]], component: list[str]) -> str:
    """One closed path through ``component`` from its first module, with each import's
    line: ``a:12 -> b:40 -> a`` (breadth-first, so the shortest)."""
    inside = set(component)
    start = component[0]
    prev: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                path.reverse()
                steps = [f"{a}:{graph[a][b]}" for a, b in zip(path, [*path[1:], start], strict=True)]
                return " -> ".join([*steps, start])
            if w not in prev:
                prev[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {component}")


def parse_rules(text: str, heading: str = HEADING) -> dict[str, set[str]]:
    """The layer table under ``heading``: package -> the packages it may import, in the
    table's order (bottom first). A row may list only packages of earlier rows."""
    lines = text.splitlines()
    try:
        at = lines.index(heading)
    except ValueError:
        raise AssertionError(f"no {heading!r} section") from None
    rows = []
    for line in lines[at + 1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    rules: dict[str, set[str]] = {}
    for row in rows[2:]:  # the header and the |---| line
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"`([\w.]+)`", cells[0])
        allowed = set(re.findall(r"`([\w.]+)`", cells[1]))
        late = allowed - set(rules)
        assert not late, f"layer rules: {names} may import {sorted(late)}, not in an earlier row"
        for name in names:
            rules[name] = allowed
    assert rules, f"an empty table under {heading!r}"
    return rules


def unit(module: str) -> str:
    """The layer unit of a module: its top-level package or module (``merkat`` for the
    root ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def crossings(graph: Mapping[str, Mapping[str, int]],
              rules: Mapping[str, set[str]]) -> dict[tuple[str, str], int]:
    """Every import across the rules: (importer, imported) -> line."""
    out = {}
    for a, targets in graph.items():
        for b, line in targets.items():
            ua, ub = unit(a), unit(b)
            if ua != ub and ub not in rules.get(ua, set()):
                out[(a, b)] = line
    return out


def check(root: Path, package: str, rules: Mapping[str, set[str]],
          allowed_cycles: Iterable[tuple[str, str]] = (),
          allowed_crossings: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Every problem of the package's import graph, one line each (empty: all good)."""
    graph = import_graph(root, package)
    problems = [f"{m}: a module of {unit(m)!r}, which has no row in the layer rules"
                for m in graph if unit(m) not in rules]
    allowed = set(allowed_cycles)
    on_cycle = {(a, b) for comp in components(graph) for a in comp for b in graph[a]
                if b in comp}
    problems += [f"stale allowed cycle edge {a} -> {b}: not on a cycle any more, remove it"
                 for a, b in sorted(allowed - on_cycle)]
    kept = {a: {b: ln for b, ln in t.items() if (a, b) not in allowed} for a, t in graph.items()}
    problems += [f"import cycle of {len(c)} modules {c}: {cycle_path(kept, c)}"
                 for c in components(kept)]
    found = crossings(graph, rules)
    tolerated = set(allowed_crossings)
    problems += [f"stale allowed crossing {a} -> {b}: no such import, remove it"
                 for a, b in sorted(tolerated - set(found))]
    problems += [f"layer rule broken: {a}:{line} imports {b} ({unit(a)!r} may import "
                 f"{sorted(rules.get(unit(a), ())) or 'nothing'})"
                 for (a, b), line in sorted(found.items()) if (a, b) not in tolerated]
    return problems


# --- the tests --------------------------------------------------------------------------


def test_merkat_has_no_import_cycle_and_keeps_the_layer_rules() -> None:
    rules = parse_rules(ARCHITECTURE.read_text())
    problems = check(PACKAGE, "merkat", rules, ALLOWED_CYCLES, ALLOWED_CROSSINGS)
    assert not problems, "\n".join(problems)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


RULES = """\
## Layers: who may import whom

| package | may import |
|---|---|
| `pkg` | — |
| `low` | — |
| `high` | `low` |
"""


def test_the_checker_finds_a_planted_cycle_and_a_planted_violation(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    _write(root, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from . import b  # a submodule, relative, under TYPE_CHECKING
        """,
        "low/b.py": """\
            def f():
                from pkg.low.c import g  # deferred
                return g
        """,
        "low/c.py": "import pkg.low.a.nothing  # the longest known prefix: pkg.low.a\n",
        "low/d.py": "from ..high import x  # a crossing: low may import nothing\n",
        "high/__init__.py": "",
        "high/x.py": "from pkg.low import d\nimport os\n",
    })
    rules = parse_rules(RULES)
    assert rules == {"pkg": set(), "low": set(), "high": {"low"}}
    graph = import_graph(root, "pkg")
    assert graph["pkg.low.a"] == {"pkg.low.b": 4}
    assert graph["pkg.high.x"] == {"pkg.low.d": 1}
    assert components(graph) == [["pkg.high.x", "pkg.low.d"],
                                 ["pkg.low.a", "pkg.low.b", "pkg.low.c"]]
    problems = check(root, "pkg", rules)
    assert problems == [
        "import cycle of 2 modules ['pkg.high.x', 'pkg.low.d']: "
        "pkg.high.x:1 -> pkg.low.d:1 -> pkg.high.x",
        "import cycle of 3 modules ['pkg.low.a', 'pkg.low.b', 'pkg.low.c']: "
        "pkg.low.a:4 -> pkg.low.b:2 -> pkg.low.c:1 -> pkg.low.a",
        "layer rule broken: pkg.low.d:1 imports pkg.high.x ('low' may import nothing)",
    ]
    # the allow-lists silence exactly what they name, and fail when they name nothing
    assert check(root, "pkg", rules, [("pkg.low.b", "pkg.low.c"), ("pkg.low.d", "pkg.high.x")],
                 [("pkg.low.d", "pkg.high.x")]) == []
    assert check(root, "pkg", rules, [("pkg.low.c", "pkg.low.b")],
                 [("pkg.high.x", "pkg.low.d")])[:1] == [
        "stale allowed cycle edge pkg.low.c -> pkg.low.b: not on a cycle any more, remove it"]


def test_a_package_without_a_row_and_a_row_out_of_order_fail(tmp_path: Path) -> None:
    _write(tmp_path / "pkg", {"__init__.py": "", "new/__init__.py": ""})
    assert check(tmp_path / "pkg", "pkg", {"pkg": set()}) == [
        "pkg.new: a module of 'new', which has no row in the layer rules"]
    with pytest.raises(AssertionError, match=r"\['low'\] may import \['high'\]"):
        parse_rules(RULES.replace("| `low` | — |", "| `low` | `high` |"))
