"""docs/architecture.md against the tree: its "Where each module runs" table names every module of
`tracer/` in its subpackage's row and no module that does not exist, and every module, file or
name of `tracer` the doc mentions is there."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
TRACER = ROOT / "tracer"
TOP_LEVEL = "tracer/"  # the row of tracer/*.py, "`tracer/` (top level)"


def _split_items(cell: str) -> list[str]:
    """A cell's items: split at the commas outside parentheses and backticks."""
    items, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(cell):
        if ch == "`":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            items.append(cell[start:i])
            start = i + 1
    items.append(cell[start:])
    return [item.strip() for item in items if item.strip()]


def module_table(text: str | None = None) -> dict[str, list[str]]:
    """The rows between the doc's `<!-- modules` markers: `tracer/<sub>/` (or `tracer/` for the
    top level) -> the module named first in each item of its "modules" cell."""
    text = DOC.read_text() if text is None else text
    body = text.split("<!-- modules", 1)[1].split("<!-- /modules -->", 1)[0]
    table: dict[str, list[str]] = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        package = re.match(r"`(tracer/(?:\w+/)?)`", cells[0]) if len(cells) >= 3 else None
        if package is None:
            continue  # the heading, its rule, tui/ and web/
        names = []
        for item in _split_items(cells[2]):
            first = re.match(r"`(\w+)`", item)
            assert first, f"{package[1]}: an item of its modules cell does not start with a module: {item!r}"
            names.append(first[1])
        table[package[1]] = names
    return table


def tree_modules() -> dict[str, set[str]]:
    """`tracer/<sub>/` -> its modules; `tracer/` -> the top-level modules (no `__init__`)."""
    tree = {TOP_LEVEL: {p.stem for p in TRACER.glob("*.py") if p.stem != "__init__"}}
    for sub in sorted(p for p in TRACER.iterdir() if (p / "__init__.py").exists()):
        tree[f"tracer/{sub.name}/"] = {p.stem for p in sub.glob("*.py") if p.stem != "__init__"}
    return tree


def table_problems(table: dict[str, list[str]], tree: dict[str, set[str]]) -> list[str]:
    out = [f"{pkg}: no row in the table" for pkg in tree if pkg not in table]
    for pkg, named in table.items():
        present = tree.get(pkg)
        if present is None:
            out.append(f"{pkg}: a row, but no such package")
            continue
        out += [f"{pkg}{m}.py: missing from its row" for m in sorted(present - set(named))]
        out += [f"{pkg}{m}: named in its row, but no such module" for m in sorted(set(named) - present)]
        out += [f"{pkg}{m}: named twice" for m in sorted({m for m in named if named.count(m) > 1})]
    return out


def test_the_table_names_every_module_and_only_real_ones() -> None:
    table = module_table()
    assert {"tracer/trace/", "tracer/analysis/", TOP_LEVEL} <= set(table)  # the parse saw the table
    assert table_problems(table, tree_modules()) == []


def test_the_table_check_names_what_is_wrong() -> None:
    doc = (
        "<!-- modules -->\n| package | runs | modules | rules |\n|---|---|---|---|\n"
        "| `tracer/x/` | here | `a` (one, `b`: two), `gone` | |\n"
        "| `tracer/y/` | here | `c` | |\n<!-- /modules -->"
    )
    table = module_table(doc)
    assert table == {"tracer/x/": ["a", "gone"], "tracer/y/": ["c"]}
    tree = {"tracer/x/": {"a", "b"}, "tracer/z/": {"d"}, "tracer/y/": {"c"}}
    assert table_problems(table, tree) == [
        "tracer/z/: no row in the table",
        "tracer/x/b.py: missing from its row",
        "tracer/x/gone: named in its row, but no such module",
    ]


# -- every name of tracer the doc mentions ----------------------------------------------------
def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module or class body binds at its own level (defs, classes, assignments,
    imports), each with the statement that binds it."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks, optional imports
            names.update(_defined(node.body))
    return names


def resolve(dotted: str) -> str | None:
    """None when `tracer.a.b.Name.attr` names a real module, and a name bound at the top of it
    (and, for a class, in its body); else what is missing."""
    parts = dotted.split(".")
    path = ROOT / parts[0]
    i = 1
    while i < len(parts) and ((path / parts[i]).is_dir() or (path / f"{parts[i]}.py").exists()):
        path = path / parts[i] if (path / parts[i]).is_dir() else path / f"{parts[i]}.py"
        i += 1
    if i == len(parts):
        return None
    source = path / "__init__.py" if path.is_dir() else path
    body: list[ast.stmt] = ast.parse(source.read_text()).body
    for depth, name in enumerate(parts[i:]):
        bound = _defined(body).get(name)
        if bound is None:
            return f"{'.'.join(parts[: i + depth + 1])}: no such module or name"
        if not isinstance(bound, ast.ClassDef):
            return None  # a function's or a value's attributes are not checked
        body = bound.body
    return None


DOTTED = re.compile(r"(?<![\w./])tracer(?:\.\w+)+")
PATHS = re.compile(r"(?<![\w./])(?:tracer|tui|web|tests|bench|docs)/[\w./-]*\w")


def test_every_name_the_doc_mentions_exists() -> None:
    text = DOC.read_text()
    dotted = sorted(set(DOTTED.findall(text)))
    assert "tracer.trace.source.TraceSource" in dotted  # the pattern really matches
    assert [p for name in dotted if (p := resolve(name))] == []
    paths = sorted(set(PATHS.findall(text)))
    assert "tracer/render/text.py" in paths
    assert [f"{p}: no such file or directory" for p in paths if not (ROOT / p).exists()] == []


def test_resolve_names_what_is_missing() -> None:
    assert resolve("tracer.trace.builder.TraceBuilder") is None
    assert resolve("tracer.trace.source.SourceState.problem") is None
    assert resolve("tracer.analysis") is None
    assert resolve("tracer.trace.nowhere") == "tracer.trace.nowhere: no such module or name"
    assert resolve("tracer.trace.reader.Nothing") == "tracer.trace.reader.Nothing: no such module or name"
    assert resolve("tracer.trace.source.SourceState.nothing") == (
        "tracer.trace.source.SourceState.nothing: no such module or name"
    )


def test_the_tree_walk_sees_the_packages() -> None:
    tree = tree_modules()
    assert {"reader", "errors", "index_follower"} <= tree["tracer/trace/"]
    assert {"scheduler", "cli"} <= tree[TOP_LEVEL]
    assert "__init__" not in tree["tracer/analysis/"]
