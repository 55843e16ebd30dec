"""tracer never imports a UI library (nor tui or web), nor vLLM unless vLLM loads it, as
harlequin proves its own import contract: statically and in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

FORBIDDEN = ("textual", "dash", "plotly")


def _modules_after(code: str) -> set[str]:
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_reader_side_imports_neither_ui_nor_vllm() -> None:
    mods = _modules_after(
        "import tracer, tracer.trace.reader, tracer.render.summary, tracer.cli, tracer.trace.schema, "
        "tracer.record.recorder, tracer.record.writer, tracer.whatif.offline, tracer.record.runner_hook, "
        "tracer.trace.spec_decode_methods, tracer.doctor, tracer.analysis.timing, "
        "tracer.analysis.throughput, "
        "tracer.render.timing_report, tracer.whatif.workload, tracer.whatif.fidelity"
    )
    roots = {m.split(".")[0] for m in mods}
    assert not roots & {*FORBIDDEN, "vllm", "torch"}


def test_vllm_side_imports_no_ui() -> None:
    mods = _modules_after("import tracer.scheduler")
    roots = {m.split(".")[0] for m in mods}
    assert "vllm" in roots
    assert not roots & set(FORBIDDEN)


# What a tracing scheduler may load into EngineCore: the recorder, its servers and the format's
# constants, never the reader, its sidecars and stores, analysis, what-if, render or a view.
ENGINE_CORE_MODULES = {
    "tracer", "tracer.scheduler", "tracer.policies", "tracer.draft_budget",
    "tracer.record", "tracer.record.engine_config", "tracer.record.indexer", "tracer.record.recorder",
    "tracer.record.runner_hook", "tracer.record.writer", "tracer.record.snapshot", "tracer.record.encoder",
    "tracer.record.shipper", "tracer.record.config", "tracer.record.wiring",
    "tracer.record.runner_notes", "tracer.record.speculator_hook",
    "tracer.live", "tracer.live.net", "tracer.live.stream", "tracer.live.taps",
    "tracer.trace", "tracer.trace.index_files", "tracer.trace.spec_decode_methods", "tracer.trace.schema",
}  # fmt: skip


def test_engine_core_loads_only_what_records() -> None:
    """`--scheduler-cls tracer.scheduler.TracingScheduler` (or a policy's class) imports the
    recorder and nothing of the viewer side: every module it loads is on the list above."""
    mods = _modules_after("import tracer.scheduler, tracer.policies")
    loaded = {m for m in mods if m.split(".")[0] == "tracer"}
    assert loaded - ENGINE_CORE_MODULES == set()
    assert {"tracer.record.recorder", "tracer.record.writer", "tracer.policies"} <= loaded


def _imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
    return names


def test_no_tracer_module_names_a_ui_package() -> None:
    """Statically, lazy imports included (the run-time check above cannot see an import
    inside a function that did not run): tracer never imports a UI library, tui or web."""
    banned = {*FORBIDDEN, "tui", "web"}
    offenders = {
        str(path.relative_to(ROOT)): sorted(n for n in _imported_names(path) if n.split(".")[0] in banned)
        for path in sorted((ROOT / "tracer").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert len(offenders) > 20  # the walk really saw the package


def test_the_views_do_not_import_each_other() -> None:
    for pkg, other in (("tui", "web"), ("web", "tui")):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            names = _imported_names(path)
            assert not {n for n in names if n.split(".")[0] == other}, path


# -- one-way layers (docs/architecture.md "Layers") --------------------------------------------
PACKAGES = ("tracer", "tui", "web")
LAYERS_DOC = ROOT / "docs" / "architecture.md"


def layer_table(text: str | None = None) -> dict[str, set[str]]:
    """The rows between the doc's `<!-- layers` markers: layer -> the layers it may import."""
    text = LAYERS_DOC.read_text() if text is None else text
    body = text.split("<!-- layers", 1)[1].split("<!-- /layers -->", 1)[0]
    table: dict[str, set[str]] = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue  # the heading, its rule, the marker's own line
        table[cells[0].strip("`")] = {n.strip().strip("`") for n in cells[1].split(",") if "`" in n}
    return table


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def module_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (lazy and TYPE_CHECKING
    imports included): `from a import b` is module a.b when that is a module, else a."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            callee = getattr(func, "id", None) or getattr(func, "attr", None)
            if callee in ("__import__", "import_module") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    # `import a.b.c` names a.b.c; a module that is not ours (vllm, numpy) is not in the graph.
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: module_imports(name, path, set(modules)) for name, path in modules.items()}


def _relative(module: str) -> str:
    """tracer.analysis.flags -> analysis.flags; tracer -> tracer; tui.app stays."""
    if module == "tracer":
        return "tracer"
    return module.removeprefix("tracer.")


def layer_of(module: str) -> str:
    return _relative(module).split(".")[0]


def allowed(module: str, table: dict[str, set[str]]) -> set[str]:
    """Its layer's row, plus the row of any of its own prefixes (live.metrics adds to live)."""
    parts = _relative(module).split(".")
    return set().union(*(table.get(".".join(parts[:i]), set()) for i in range(1, len(parts) + 1)))


def layer_violations(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    out = [f"{m}: its layer {layer_of(m)!r} has no row" for m in graph if layer_of(m) not in table]
    for module, imported in sorted(graph.items()):
        ok = allowed(module, table)
        for target in sorted(imported):
            if layer_of(target) != layer_of(module) and layer_of(target) not in ok:
                out.append(f"{module} imports {target}: {layer_of(module)} may not import {layer_of(target)}")
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    members.append(m)
                    if m == node:
                        break
                if len(members) > 1:
                    cycles.append(sorted(members))
    return cycles


def test_the_layer_table_names_real_layers() -> None:
    table = layer_table()
    layers = {layer_of(m) for m in all_modules()}
    assert {"trace", "record", "analysis", "live", "whatif", "render", "cli", "tui", "web"} <= set(table)
    for row, imports in table.items():
        assert row.split(".")[0] in layers, row
        assert imports <= layers, (row, imports - layers)
        assert row.split(".")[0] not in imports, f"{row}: a layer always imports itself"


def test_every_import_runs_down_the_layer_table() -> None:
    graph = import_graph()
    assert len(graph) > 80  # the walk really saw tracer, tui and web
    assert layer_violations(graph, layer_table()) == []


# What reads a trace input (a file, a recording's sidecar, an upload, a growing file or a stream):
# the opening layer's, never analysis's, which computes over the Traces it is handed.
OPENERS = {"tracer.trace.reader", "tracer.trace.ingest", "tracer.trace.source", "tracer.trace.attach"}


def test_analysis_opens_nothing() -> None:
    graph = import_graph()
    opening = {m for m, imports in graph.items() if m.startswith("tracer.analysis.") and imports & OPENERS}
    assert opening == set()
    # The check sees an opener where there is one: the door's.
    assert graph["tracer.opening.door"] & OPENERS


def test_no_import_cycle_between_modules() -> None:
    assert import_cycles(import_graph()) == []


def test_the_layer_table_itself_has_no_cycle() -> None:
    table = layer_table()
    graph = {row: {t for t in imports if t in table} for row, imports in table.items() if "." not in row}
    assert import_cycles(graph) == []


def test_the_checks_catch_a_back_import_and_a_cycle() -> None:
    """The checks above, on a made-up graph: a lower layer importing a higher one, lazily or
    not, is one violation; two modules importing each other are one cycle."""
    table = layer_table("<!-- layers -->\n| `trace` | — |\n| `analysis` | `trace` |\n<!-- /layers -->")
    graph = {
        "tracer.trace.reader": {"tracer.analysis.flags"},
        "tracer.analysis.flags": {"tracer.trace.reader", "tracer.analysis.budget"},
        "tracer.analysis.budget": {"tracer.analysis.flags"},
    }
    assert layer_violations(graph, table) == [
        "tracer.trace.reader imports tracer.analysis.flags: trace may not import analysis"
    ]
    assert import_cycles(graph) == [sorted(graph)]
