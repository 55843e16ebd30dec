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
        "tracer.trace.methods, tracer.doctor, tracer.analysis.timing, "
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
