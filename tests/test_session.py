"""tracer.analysis.session (one analysis per snapshot) and tracer.render.text (one voice)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tracer.analysis import budget, flags
from tracer.analysis.compare import compare
from tracer.analysis.session import Demand, RequestEntry, Session, request_entries, step_requests
from tracer.render.compare import diff_lines
from tracer.render.perfetto import to_chrome_trace
from tracer.render.summary import summary_lines
from tracer.render.text import (
    RunLine,
    Total,
    compare_totals,
    engine_line,
    flags_line,
    spec_label,
    totals_lines,
)
from tracer.trace.reader import load

from .conftest import ROOT

SAMPLES = ROOT / "sample_traces"
ADDITIVE = SAMPLES / "dflash_k7_additive.jsonl"
SEPARATE = SAMPLES / "dflash_k7_separate.jsonl"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How many times the budget model and the detectors ran, however a module imported them:
    each run builds one BudgetAnalysis / FlagReport."""
    counts = {"analyze": 0, "detect": 0}
    for name, cls in (("analyze", budget.BudgetAnalysis), ("detect", flags.FlagReport)):
        real = cls.__init__

        def init(self: Any, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> None:
            counts[_name] += 1
            _real(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)
    yield counts


def test_every_output_reuses_one_analysis(calls: dict[str, int]) -> None:
    a, b = Session(load(ADDITIVE)), Session(load(SEPARATE))
    text = "\n".join(summary_lines(a))
    doc = to_chrome_trace(a)
    c = compare(a, b)
    diff = diff_lines(c)
    assert a.series["withheld"].tolist() == [7, 7, 7, 7, 0, 0, 0]
    assert a.flag_rows.tolist() == [0, 1, 2, 3] and a.report is c.a.flags and b.report is c.b.flags
    assert calls == {"analyze": 2, "detect": 2}  # one of each per session, however many outputs
    assert "28 tokens withheld" in text and doc["otherData"]["tokens_withheld"] == 28
    assert f"{'tokens withheld':24}{28:>12}{0:>12}{-28:>10}" in diff


def test_a_session_computes_once_under_concurrent_callers(calls: dict[str, int]) -> None:
    s = Session(load(ADDITIVE))
    barrier = threading.Barrier(8)
    seen: list[int] = []

    def ask() -> None:
        barrier.wait()
        seen.append(id(s.report))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 1 and calls["detect"] == 1


def test_compare_takes_traces_or_sessions_alike() -> None:
    by_trace = compare(load(ADDITIVE), load(SEPARATE))
    by_session = compare(Session(load(ADDITIVE)), Session(load(SEPARATE)))
    assert diff_lines(by_trace) == diff_lines(by_session)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.jsonl")), ids=lambda p: p.name)
def test_typed_entries_are_the_records_entries(path: Any) -> None:
    trace = load(path)
    session = Session(trace)
    for row, rec in enumerate(trace.steps()):
        reqs = step_requests(rec)
        raw = [(g, e) for g in ("new", "resumed", "running") for e in rec[g]]
        assert [(e.kind, list(e[:4])) for e in reqs.scheduled] == [(g, list(e)) for g, e in raw]
        assert reqs.unscheduled == [Demand(*e) for e in rec["unscheduled"]]
        assert reqs.waiting == [Demand(*e) for e in rec["waiting_demand"]]
        assert (reqs.preempted, reqs.finished) == (rec["preempted"], rec["finished"])
        assert reqs.waiting_truncated == rec["waiting_demand_truncated"]
        assert session.requests(row) == reqs
        assert session.row_of(int(trace.columns["step"][row])) == row
    assert session.row_of(10**9) is None


def test_short_entries_get_the_format_defaults() -> None:
    rec = {"new": [["a", 5]], "resumed": [], "running": [["b", 4, 3, 1]]}
    assert request_entries(rec) == [RequestEntry("a", 5, 0, -1, "new"), RequestEntry("b", 4, 3, 1, "running")]


def test_one_engine_line_and_one_flags_line() -> None:
    session = Session(load(ADDITIVE))
    config = session.trace.config
    line = engine_line(config)
    assert line.startswith("dflash K=7 · draft slots 7 · query rows/req 8 · B 8192")
    assert f"engine   {line}" in list(summary_lines(session))
    doc = to_chrome_trace(session)
    names = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"]
    assert f"vLLM scheduler ({spec_label(config)}, stock)" in names
    assert flags_line(session.report) == "additive-double-reservation ×4; 28 tokens withheld"
    run = RunLine.of(session.trace, session.report)
    assert run.text == "7 steps: additive-double-reservation ×4; 28 tokens withheld"
    assert (run.flag_total, run.torn, run.gaps) == ("4 flags", "", "")
    clean = Session(load(SEPARATE))
    assert RunLine.of(clean.trace, clean.report).text == "6 steps: no flags"


def test_totals_carry_their_direction() -> None:
    c = compare(load(ADDITIVE), load(SEPARATE))
    totals = {t.label: t for t in compare_totals(c)}
    assert totals["steps to drain"].direction == "fewer is better"
    assert totals["steps to drain"].verdict == "better"  # 5 against 6
    assert totals["target tokens / step"].verdict == "better"  # more per step
    assert totals["tokens withheld"].verdict == "better" and totals["flags"].verdict == "better"
    assert totals["target_used (sum)"].verdict == "" and totals["target_used (sum)"].direction == ""
    # The verdict reads the direction, never the label.
    assert Total("x", "anything", 3, 5, better="more").verdict == "better"
    assert Total("x", "anything", 3, 5, better="fewer").verdict == "worse"
    assert Total("x", "anything", 3, 3, better="fewer").verdict == ""
    rows = totals_lines(c)
    assert rows[1:] == [
        f"{t.label:24}{t.cells()[0]:>12}{t.cells()[1]:>12}{t.cells()[2]:>10}" for t in totals.values()
    ]


def test_results_are_remembered_per_trace_object_and_forgotten_with_it(calls: dict[str, int]) -> None:
    """The one memo (tracer.analysis.memo): two Sessions over one snapshot share its results;
    a new snapshot (a new Trace object) computes afresh; a collected Trace's memo goes with it."""
    import gc
    import weakref

    from tracer.analysis import memo
    from tracer.analysis.step_features import step_pass

    trace = load(ADDITIVE)
    first, second = Session(trace), Session(trace)
    assert first.report is second.report and calls["detect"] == 1
    assert step_pass(trace) is step_pass(trace)
    again = Session(load(ADDITIVE))
    assert again.report is not first.report and calls["detect"] == 2
    gone = weakref.ref(trace)
    gc.collect()  # an earlier test's Traces left in reference cycles go now, not in the count below
    held = len(memo._MEMOS)
    del trace, first, second
    gc.collect()
    assert gone() is None and len(memo._MEMOS) == held - 1
