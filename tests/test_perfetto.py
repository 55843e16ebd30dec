"""Perfetto export: the Chrome Trace Event JSON is structurally what Perfetto's JSON importer reads."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import ROOT
from tracer.analysis.flags import detect
from tracer.cli import main
from tracer.render.flags import message
from tracer.render.perfetto import REQ_PID, SCHED_PID, export, to_chrome_trace
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

SAMPLES = ROOT / "sample_traces"
# Every sample trace; these three at least: additive flags, preemption, runner records.
TRACES = sorted(
    {"dflash_k7_additive.jsonl", "ngram_preempt.jsonl", "live_cpu_ngram.jsonl"}
    | {p.name for p in SAMPLES.glob("*.jsonl")}
)
PHASES = {"X", "C", "i", "M"}


def _load(name: str) -> Trace:
    return load(SAMPLES / name)


def _events(doc: dict[str, Any], ph: str, pid: int | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == ph and (pid is None or e["pid"] == pid)]


def _is_num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


@pytest.fixture(params=TRACES)
def exported(request: pytest.FixtureRequest) -> tuple[Trace, dict[str, Any]]:
    trace = _load(request.param)
    return trace, to_chrome_trace(trace)


def test_top_level_and_json_clean(exported: tuple[Trace, dict[str, Any]]) -> None:
    _, doc = exported
    assert doc["displayTimeUnit"] == "ms"
    assert isinstance(doc["traceEvents"], list) and isinstance(doc["otherData"], dict)
    # Strict JSON: no NaN/Infinity (Perfetto's parser rejects them), and it survives a round trip.
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text) == json.loads(orjson.dumps(doc))


def test_event_fields_and_types(exported: tuple[Trace, dict[str, Any]]) -> None:
    _, doc = exported
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["name"]
        assert e["ph"] in PHASES
        assert type(e["pid"]) is int and type(e["tid"]) is int
        assert _is_num(e["ts"]) and e["ts"] >= 0
        assert isinstance(e.get("args", {}), dict)
        if e["ph"] == "X":
            assert _is_num(e["dur"]) and e["dur"] >= 0
        if e["ph"] == "C":
            assert e["args"] and all(_is_num(v) for v in e["args"].values()), e
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")


def test_metadata_names_every_pid_and_tid(exported: tuple[Trace, dict[str, Any]]) -> None:
    _, doc = exported
    procs = {e["pid"] for e in _events(doc, "M") if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in _events(doc, "M") if e["name"] == "thread_name"}
    for e in doc["traceEvents"]:
        if e["ph"] != "M":
            assert e["pid"] in procs
            assert (e["pid"], e["tid"]) in threads, e
    sort = [e for e in _events(doc, "M", REQ_PID) if e["name"] == "thread_sort_index"]
    assert [e["args"]["sort_index"] for e in sort] == sorted(e["args"]["sort_index"] for e in sort)


def _track(e: dict[str, Any]) -> tuple[Any, ...]:
    if e["ph"] == "C":
        return ("C", e["pid"], e["name"])
    if e["ph"] == "i" and e["s"] != "t":
        return ("i", e["s"], e["pid"])
    return ("thread", e["pid"], e["tid"])


def test_per_track_order_and_slices_do_not_overlap(exported: tuple[Trace, dict[str, Any]]) -> None:
    _, doc = exported
    last: dict[tuple[Any, ...], float] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M":
            continue
        key = _track(e)
        assert e["ts"] >= last.get(key, 0), f"time goes back on {key}"
        last[key] = e["ts"]
    # Perfetto needs slices on one thread to nest: ours never overlap at all.
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in _events(doc, "X"):
        by_thread[(e["pid"], e["tid"])].append(e)
    for slices in by_thread.values():
        for a, b in itertools.pairwise(slices):
            assert a["ts"] + a["dur"] <= b["ts"]


def test_one_step_slice_per_step(exported: tuple[Trace, dict[str, Any]]) -> None:
    trace, doc = exported
    steps = [e for e in _events(doc, "X", SCHED_PID)]
    assert [e["args"]["step"] for e in steps] == trace.columns["step"].tolist()
    assert [e["args"]["target_used"] for e in steps] == trace.columns["target_used"].tolist()
    assert all(e["dur"] >= 1 for e in steps)
    t0 = trace.header["t0"]
    first = steps[0]["ts"] if steps else 0
    assert first == round((trace.columns["t"][0] - t0) * 1e6)


def test_one_flag_instant_per_flag(exported: tuple[Trace, dict[str, Any]]) -> None:
    trace, doc = exported
    report = detect(trace)
    flags = [e for e in _events(doc, "i") if e["s"] in ("g", "p")]
    assert [(e["name"], e["args"]["step"]) for e in flags] == [(f.kind, f.step) for f in report.flags]
    for e, f in zip(flags, report.flags, strict=True):
        assert e["args"]["message"] == message(f)
        assert {k: e["args"][k] for k in f.numbers} == f.numbers


def test_additive_flags_present() -> None:
    doc = to_chrome_trace(_load("dflash_k7_additive.jsonl"))
    kinds = {e["name"] for e in _events(doc, "i") if e["s"] == "p"}
    assert kinds == {"additive-double-reservation"}
    assert doc["otherData"]["tokens_withheld"] > 0
    reserved = [e["args"]["reserved"] for e in _events(doc, "C") if e["name"] == "input budget"]
    assert reserved and max(reserved) > 0


def test_request_slices_sum_to_trace_totals(exported: tuple[Trace, dict[str, Any]]) -> None:
    trace, doc = exported
    col = trace.columns
    slices = _events(doc, "X", REQ_PID)
    total = int((col["new_tokens"] + col["resumed_tokens"] + col["running_tokens"]).sum())
    assert sum(e["args"]["tokens"] for e in slices) == total
    assert sum(e["args"]["spec_tokens"] for e in slices) == int(col["spec_tokens"].sum())
    assert {e["name"] for e in slices} <= {"prefill", "decode", "resumed"}
    # Each lane is one request here (few requests): its name is the request id.
    names = {e["tid"]: e["args"]["name"] for e in _events(doc, "M", REQ_PID) if e["name"] == "thread_name"}
    assert all(names[e["tid"]] == e["args"]["req"] for e in slices)


def test_preemption_and_finish_instants() -> None:
    trace = _load("ngram_preempt.jsonl")
    doc = to_chrome_trace(trace)
    instants = [e for e in _events(doc, "i", REQ_PID) if e["s"] == "t"]
    steps = trace.steps()
    for kind in ("preempted", "finished"):
        want = sorted((s["step"], r) for s in steps for r in s[kind])
        got = sorted((e["args"]["step"], e["args"]["req"]) for e in instants if e["name"] == kind)
        assert got == want
    assert any(e["name"] == "resumed" for e in _events(doc, "X", REQ_PID))
    assert any(e["name"] == "preempted" for e in instants)


def test_runner_buffer_counters() -> None:
    trace = _load("live_cpu_ngram.jsonl")
    doc = to_chrome_trace(trace)
    buf = [e for e in _events(doc, "C") if e["name"] == "buffer: target pass"]
    observed = [int(r) for r in trace.runner["target_rows"] if r >= 0]
    assert observed and [e["args"]["rows"] for e in buf] == observed
    assert all(e["args"]["rows"] <= e["args"]["cap"] for e in buf)


def test_lanes_are_reused_beyond_max_lanes() -> None:
    trace = _load("live_cpu_ngram.jsonl")
    full, packed = to_chrome_trace(trace), to_chrome_trace(trace, max_lanes=1)
    lanes = {e["tid"] for e in packed["traceEvents"] if e["pid"] == REQ_PID and e["ph"] != "M"}
    requests = {e["args"]["req"] for e in _events(full, "X", REQ_PID)}
    assert len(lanes) < len(requests)
    # Same slices, just packed into fewer lanes, still never overlapping.
    key = [(e["ts"], e["args"]["req"], e["args"]["tokens"]) for e in _events(full, "X", REQ_PID)]
    assert sorted(key) == sorted(
        (e["ts"], e["args"]["req"], e["args"]["tokens"]) for e in _events(packed, "X", REQ_PID)
    )
    test_per_track_order_and_slices_do_not_overlap((trace, packed))


def test_export_json_and_gzip_round_trip(tmp_path: Path) -> None:
    trace = _load("dflash_k7_additive.jsonl")
    want = json.loads(orjson.dumps(to_chrome_trace(trace)))
    plain = export(trace, tmp_path / "out.json")
    assert json.loads(plain.read_text()) == want
    gz = export(trace, tmp_path / "out.json.gz")
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(gz.read_bytes())) == want


def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.json.gz"
    assert main(["export", str(SAMPLES / "ngram_preempt.jsonl"), "-o", str(out)]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert _events(doc, "X", SCHED_PID)
    assert str(out) in capsys.readouterr().out
    assert main(["export", str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 2
    assert main(["export", str(SAMPLES / "ngram_preempt.jsonl"), "-o", str(tmp_path / "no/dir.json")]) == 2


def test_perfetto_imports_no_ui() -> None:
    from tests.test_layering import FORBIDDEN, _modules_after

    roots = {m.split(".")[0] for m in _modules_after("import tracer.render.perfetto")}
    assert not roots & {*FORBIDDEN, "vllm", "torch"}
