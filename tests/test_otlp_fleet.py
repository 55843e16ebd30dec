"""docs/fleet.md's DuckDB query, read from the doc and run on the sample traces exported to
Parquet: its answer equals the same figures computed without Parquet or SQL (why's reasons of
each step's listed waiting requests, weighted by the time to the next step), and the answer
the doc shows is that answer."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from tests.conftest import ROOT
from tracer.analysis import why
from tracer.cli import main
from tracer.trace.reader import load

DOC = (ROOT / "docs" / "fleet.md").read_text()
QUERY = re.findall(r"```sql\n(.*?)```", DOC.split("### One machine: DuckDB", 1)[1], re.S)[0]
SHOWN = re.findall(r"```text\n(┌.*?)```", DOC, re.S)[0]


def test_the_fleet_query_answers_what_why_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for path in sorted((ROOT / "sample_traces").glob("*.jsonl")):
        assert (
            main(["export", str(path), "--format", "parquet", "-o", str(tmp_path / "exports" / path.stem)])
            == 0
        )
        trace = load(path)
        t = trace.columns["t"]
        for sw in why.steps_why(trace, range(len(trace))):
            for r in sw.waiting:
                cell = want[(path.stem, r.cause.code)]
                cell[0] += 1
                if sw.row + 1 < len(trace):
                    cell[1] += float(t[sw.row + 1] - t[sw.row])
    monkeypatch.chdir(tmp_path)  # the doc's paths are relative: exports/*/…
    rows = duckdb.sql(QUERY).fetchall()
    assert len(rows) == len(want) > 5
    for engine, reason, steps, seconds in rows:
        assert (steps, seconds) == (want[(engine, reason)][0], round(want[(engine, reason)][1], 4))
    # The live run waited longest, behind max_num_seqs: the 79 request-steps `summary` counts.
    assert rows[0][:3] == ("live_cpu_ngram", "max_num_seqs", 79)
    # The doc's pasted answer: the same rows, in the same order.
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in SHOWN.splitlines() if line[0] == "│"]
    shown = [(e, r, int(n), float(s)) for e, r, n, s in cells[2:]]  # after the names and the types
    assert shown == rows
