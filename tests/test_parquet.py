"""`schedscope export --format parquet`, and the DuckDB queries of docs/queries.md.

The queries are read from the docs (so they cannot drift) and run on the exported sample
traces; each answer is checked against figures computed without Parquet or SQL, from the
reader's columns and `Trace.step`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tracer.analysis import step_bindings, why
from tracer.analysis.budget import analyze
from tracer.analysis.reasons import CODES
from tracer.cli import main
from tracer.trace.reader import load
from tracer.trace.schema import SCHEMA_VERSION
from tracer.trace.trace_type import Trace

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")

SAMPLES = sorted((ROOT / "sample_traces").glob("*.jsonl"))
QUERIES = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "queries.md").read_text(), re.S)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Trace]]:
    """The sample traces exported as docs/queries.md says (a directory per trace under exports/)."""
    root = tmp_path_factory.mktemp("parquet")
    traces = {}
    for path in SAMPLES:
        assert (
            main(["export", str(path), "--format", "parquet", "-o", str(root / "exports" / path.stem)]) == 0
        )
        traces[path.stem] = load(path)
    return root, traces


def _run(root: Path, sql: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    monkeypatch.chdir(root)  # the docs' paths are relative: exports/*/…
    return duckdb.sql(sql).fetchall()


def test_the_docs_hold_three_queries() -> None:
    assert len(QUERIES) == 3, "docs/queries.md: withheld per engine, preemptions per request, p99 tokens"


def test_tokens_withheld_per_engine(
    exported: tuple[Path, dict[str, Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, traces = exported
    got = _run(root, QUERIES[0], monkeypatch)
    expected = []
    for name, trace in traces.items():
        withheld = analyze(trace).withheld
        expected.append((name, int(withheld.sum()), int((withheld > 0).sum()), len(trace)))
    expected.sort(key=lambda r: (-r[1], r[0]))
    assert got == expected
    assert any(r[1] > 0 for r in got), "the additive samples withhold tokens"


def test_preemptions_per_request(
    exported: tuple[Path, dict[str, Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, traces = exported
    got = _run(root, QUERIES[1], monkeypatch)
    counts: Counter[tuple[str, str]] = Counter()
    for name, trace in traces.items():
        for i in range(len(trace)):
            for rid in trace.step(i)["preempted"]:
                counts[name, rid] += 1
    expected = sorted(((e, r, n) for (e, r), n in counts.items()), key=lambda x: (-x[2], x[0], x[1]))
    assert got == expected and len(got) >= 3


def test_p99_scheduled_tokens(
    exported: tuple[Path, dict[str, Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, traces = exported
    got = _run(root, QUERIES[2], monkeypatch)
    expected = []
    for name in sorted(traces):
        used = traces[name].columns["target_used"]
        cap = traces[name].columns["target_cap"]
        expected.append((name, float(np.quantile(used, 0.99)), int(used.max()), int(cap[0])))
    assert [r[0] for r in got] == [r[0] for r in expected]
    for a, b in zip(got, expected, strict=True):
        assert a[0] == b[0] and a[1] == pytest.approx(b[1], rel=1e-12) and a[2:] == b[2:]


def _check_tables(out: Path, trace: Trace, engine: str) -> None:
    """The exported tables against the reader: every step column, and every request entry."""
    steps = pq.read_table(out / "steps.parquet").to_pydict()
    assert set(steps["engine"]) == {engine}
    for name, column in trace.columns.items():
        assert steps[name] == column.tolist(), name
    for name, column in trace.runner.items():
        assert steps[f"runner_{name}"] == column.tolist(), name
    assert steps["withheld_tokens"] == analyze(trace).withheld.tolist()
    assert steps["binding"] == [CODES[c] for c in step_bindings.bindings(trace).tolist()]
    req = pq.read_table(out / "requests.parquet").to_pylist()
    expected = []
    reasons = []
    for i in range(len(trace)):
        rec = trace.step(i)
        held = {r.id: r for r in why.step_why(trace, i).requests}
        gone = set(rec["preempted"])
        sampled = rec["sampled"]
        seen = set()
        for kind in ("new", "resumed", "running"):
            for rid, tokens, spec, demand in rec[kind]:
                seen.add(rid)
                smp = None if sampled is None else sampled.get(rid)
                expected.append((rec["step"], rid, kind, tokens, spec, demand, smp, rid in gone))
                reasons.append(held[rid].cause.code if rid in held else None)
        for rid in rec["preempted"]:
            if rid not in seen:
                expected.append((rec["step"], rid, "preempted", 0, 0, -1, None, True))
                reasons.append(None)
        for r in held.values():  # held back: a row each, with the reason
            if r.state != "clipped":
                expected.append((rec["step"], r.id, r.state, 0, 0, r.demand, None, False))
                reasons.append(r.cause.code)
    got = [
        (
            r["step"],
            r["request_id"],
            r["kind"],
            r["tokens"],
            r["spec"],
            r["demand"],
            r["sampled"],
            r["preempted"],
        )
        for r in req
    ]
    assert got == expected
    assert [r["reason"] for r in req] == reasons
    assert {r["engine"] for r in req} <= {engine}


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_tables_equal_the_readers_view(exported: tuple[Path, dict[str, Trace]], path: Path) -> None:
    root, traces = exported
    _check_tables(root / "exports" / path.stem, traces[path.stem], path.stem)


def test_a_format_12_trace_exports_in_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generated trace in the recorder's current format, with preemptions, over several row groups."""
    from tracer.render import parquet

    trace_path = tmp_path / "gen.jsonl"
    args = ["--steps", "700", "--kv-blocks", "300", "--max-running", "32"]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(trace_path), *args], check=True)
    trace = load(trace_path)
    assert trace.header["schema"] == SCHEMA_VERSION and int(trace.columns["n_preempted"].sum()) > 0
    monkeypatch.setattr(parquet, "CHUNK", 256)
    seen: list[tuple[int, int]] = []
    parquet.export(trace, tmp_path / "out", engine="gen", progress=lambda d, t: seen.append((d, t)))
    assert seen == [(256, 700), (512, 700), (700, 700)]
    assert pq.ParquetFile(tmp_path / "out" / "requests.parquet").num_row_groups == 3
    _check_tables(tmp_path / "out", trace, "gen")


def test_without_pyarrow_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code = main(["export", str(SAMPLES[0]), "--format", "parquet", "-o", str(tmp_path / "x")])
    assert code == 2
    err = capsys.readouterr().err
    assert "needs pyarrow: pip install 'schedscope[parquet]'" in err
    assert not (tmp_path / "x").exists()
