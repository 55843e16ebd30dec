"""tracer stays UI-free with the web app's helpers; web parses no JSON and holds no budget logic."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_model_helpers_import_no_ui() -> None:
    code = (
        "import tracer.analysis.series, tracer.trace.ingest, tracer.render.text, tracer.cli, json, sys\n"
        "tracer.cli.build_parser()\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    roots = {m.split(".")[0] for m in modules}
    assert not roots & {"dash", "plotly", "textual", "kaleido"}
    # Declaring the viewers' subcommands loads their small cli modules, nothing else of them.
    assert {m for m in modules if m.split(".")[0] in ("web", "tui")} <= {"web", "web.cli", "tui", "tui.cli"}


def test_web_parses_no_trace_json_itself() -> None:
    for path in (ROOT / "web").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(orjson|json)\b", text, re.M), path
        assert ".loads(" not in text, path
