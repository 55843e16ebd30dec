"""tracer never imports a UI library, nor vLLM unless vLLM loads it (as harlequin proves it)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

FORBIDDEN = ("textual", "dash", "plotly")


def _modules_after(code: str) -> set[str]:
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_reader_side_imports_neither_ui_nor_vllm() -> None:
    mods = _modules_after(
        "import tracer, tracer.reader, tracer.summary, tracer.cli, tracer.schema, "
        "tracer.recorder, tracer.writer, tracer.offline, tracer.runner_hook, tracer.methods, tracer.doctor, "
        "tracer.timing, tracer.throughput, tracer.timing_report, tracer.workload, tracer.fidelity"
    )
    roots = {m.split(".")[0] for m in mods}
    assert not roots & {*FORBIDDEN, "vllm", "torch"}


def test_vllm_side_imports_no_ui() -> None:
    mods = _modules_after("import tracer.scheduler")
    roots = {m.split(".")[0] for m in mods}
    assert "vllm" in roots
    assert not roots & set(FORBIDDEN)
