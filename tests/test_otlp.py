"""`schedscope export --otlp / --otlp-json`: the spans a real OTLP/HTTP receiver decodes (the
official protobuf definitions, over real HTTP) carry what schedscope's own analysis says of each
request of the bundled sample traces; the OTLP JSON file parses into the same export requests;
a collector that is down, refusing or slow ends the export in bounded time, naming it and
counting the spans dropped."""

from __future__ import annotations

import base64
import socket
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import ROOT
from tests.otlp_support import receiver
from tracer.analysis import why
from tracer.analysis.request_phases import request_phases
from tracer.analysis.requests import request_events
from tracer.analysis.session import Session
from tracer.analysis.step_features import step_pass
from tracer.analysis.timing import step_durations
from tracer.cli import main
from tracer.render import otlp
from tracer.send_spans import send
from tracer.trace.reader import load

LIVE = ROOT / "sample_traces" / "live_cpu_ngram.jsonl"
PREEMPT = ROOT / "sample_traces" / "ngram_preempt.jsonl"


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


def _attrs(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}


def _by_request(spans: list[Any]) -> dict[str, dict[str, Any]]:
    """request id -> {span name: span}, every child checked to hang under its request span."""
    roots = {s.span_id: s for s in spans if s.name == "llm_request"}
    out: dict[str, dict[str, Any]] = {}
    for s in roots.values():
        assert s.parent_span_id == b"" and len(s.trace_id) == 16 and len(s.span_id) == 8
        out[_attrs(s)["gen_ai.request.id"]] = {"llm_request": s}
    for s in spans:
        if s.name == "llm_request":
            continue
        root = roots[s.parent_span_id]
        assert s.trace_id == root.trace_id
        assert root.start_time_unix_nano <= s.start_time_unix_nano <= s.end_time_unix_nano
        out[_attrs(root)["gen_ai.request.id"]][s.name] = s
    return out


def _export(trace: Path, url: str, *extra: str) -> int:
    return main(["export", str(trace), "--otlp", url, *extra])


def test_a_receiver_gets_each_request_as_schedscope_analyses_it(capsys: pytest.CaptureFixture[str]) -> None:
    with receiver() as (url, got):
        assert _export(LIVE, url) == 0
    assert got.paths == ["/v1/traces"]  # the OTLP/HTTP traces path added to a bare endpoint
    session = Session(load(LIVE))
    trace = session.trace
    times = step_pass(trace).requests
    requests = _by_request(got.spans())
    assert sorted(requests) == sorted(times.ids)
    assert (
        f"sent {len(got.spans())} spans of {len(times.ids)} requests to {url}/v1/traces"
        in capsys.readouterr().out
    )
    # Every request of this live run finished: a request span and its three phases each.
    assert {tuple(sorted(r)) for r in requests.values()} == {("decode", "llm_request", "prefill", "queue")}

    offset = trace.header["start_time"] - trace.header["t0"]
    t = trace.columns["t"]
    asked = {
        e[1]: e
        for i in range(len(trace))
        for e in trace.step(i).get("inputs") or ()
        if e[0] == "a"  # ["a", id, prompt tokens, max_tokens, priority, arrival_time, prefix]
    }
    lat = times.latency(trace, step_durations(trace))
    assert lat.basis == "arrival" and lat.requests == len(requests)
    ttft, queue = [], []
    for rid, spans in requests.items():
        root, a = spans["llm_request"], _attrs(spans["llm_request"])
        # Real timestamps: the request span starts at vLLM's arrival_time, the queue span at
        # the schedule() call that first had the request, on the wall clock.
        assert root.start_time_unix_nano == pytest.approx(asked[rid][5] * 1e9, abs=2e3)
        row = int(times.arrived[times.ids.index(rid)])
        assert spans["queue"].start_time_unix_nano == pytest.approx((t[row] + offset) * 1e9, abs=2e3)
        assert spans["queue"].end_time_unix_nano == spans["prefill"].start_time_unix_nano
        assert spans["prefill"].end_time_unix_nano == spans["decode"].start_time_unix_nano
        assert spans["decode"].end_time_unix_nano == root.end_time_unix_nano
        assert a["gen_ai.usage.prompt_tokens"] == asked[rid][2]
        assert a["gen_ai.request.max_tokens"] == asked[rid][3]
        sampled = sum(trace.step(i)["sampled"].get(rid, 0) for i in range(len(trace)))
        assert a["gen_ai.usage.completion_tokens"] == sampled
        assert a["schedscope.ttft_from"] == "arrival" and a["schedscope.finished"] is True
        assert a["gen_ai.latency.e2e"] == pytest.approx(
            (root.end_time_unix_nano - root.start_time_unix_nano) / 1e9
        )
        # Queue time by reason: what `schedscope why TRACE REQUEST` says of this request.
        story = session.request_story(rid).ttft["waiting"]
        waited = {k.removeprefix("schedscope.waiting."): v for k, v in a.items() if "waiting." in k}
        assert waited == pytest.approx(story, abs=1e-6)
        assert (
            _attrs(spans["queue"]).items()
            >= {f"schedscope.waiting.{k}": v for k, v in waited.items()}.items()
        )
        assert sum(waited.values()) == pytest.approx(a["gen_ai.latency.time_in_queue"], abs=1e-6)
        if waited:
            assert a["schedscope.binding"] == max(waited, key=waited.__getitem__)
        ttft.append(a["gen_ai.latency.time_to_first_token"])
        queue.append(a["gen_ai.latency.time_in_queue"])
    # TTFT and time in queue: `schedscope timing`'s figures for the same requests.
    assert sorted(ttft) == pytest.approx(sorted(lat.ttft_ms / 1e3), abs=1e-6)
    assert sorted(queue) == pytest.approx(sorted(lat.parts_ms["waiting"] / 1e3), abs=1e-6)
    assert sum(queue) > 0.4  # the run's later requests did queue (max_num_seqs)
    assert any("schedscope.waiting.max_num_seqs" in _attrs(r["queue"]) for r in requests.values())


def test_preemptions_are_events_with_their_trigger() -> None:
    with receiver() as (url, got):
        assert _export(PREEMPT, url, "--engine", "replica-7") == 0
    trace = Session(load(PREEMPT)).trace
    events = request_events(trace)
    steps = {sw.step: sw for sw in why.steps_why(trace, range(len(trace)))}
    offset = trace.header["start_time"] - trace.header["t0"]
    requests = _by_request(got.spans())
    preempted = {rid for rid in requests if events[rid].preempted}
    assert preempted  # the sample preempts
    for rid, spans in requests.items():
        root = spans["llm_request"]
        assert _attrs(root)["schedscope.preemptions"] == len(events[rid].preempted)
        marks = [e for e in root.events if e.name == "preempted"]
        assert [_attrs(e)["schedscope.step"] for e in marks] == events[rid].preempted
        for e in marks:
            sw = steps[_attrs(e)["schedscope.step"]]
            p = next(p for p in sw.preemptions if p.victim == rid)
            assert _attrs(e)["schedscope.preemption.trigger"] == why.trigger_kind(p)
            assert e.time_unix_nano == pytest.approx((trace.columns["t"][sw.row] + offset) * 1e9, abs=2e3)
        resumed = [e for e in root.events if e.name == "resumed"]
        assert len(resumed) == len(
            [s for s in events[rid].resumed if any(s > p for p in events[rid].preempted)]
        )
    resource = {a.key: _value(a.value) for a in got.requests[0].resource_spans[0].resource.attributes}
    assert resource["schedscope.engine"] == "replica-7" and resource["service.name"] == "schedscope"


def _from_otlp_json(line: bytes) -> ExportTraceServiceRequest:
    """OTLP JSON -> protobuf: ids are hex in OTLP JSON, base64 in protobuf's own JSON mapping."""
    doc = orjson.loads(line)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        assert len(span[key]) == {"traceId": 32}.get(key, 16)
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(doc, ExportTraceServiceRequest())


def test_the_otlp_json_file_holds_the_export_requests_sent(tmp_path: Path) -> None:
    out = tmp_path / "spans.jsonl"
    with receiver() as (url, got):
        assert _export(PREEMPT, url, "--otlp-json", str(out)) == 0
    lines = out.read_bytes().splitlines()
    assert [_from_otlp_json(line) for line in lines] == got.requests
    doc = orjson.loads(lines[0])
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["kind"] == 2 and span["name"] == "llm_request"  # enums as integers, camelCase keys
    # The same trace again: the same ids (a backend keeps one copy).
    again = tmp_path / "again.jsonl"
    assert main(["export", str(PREEMPT), "--otlp-json", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("fault", ["down", "unavailable", "slow"])
def test_a_collector_that_does_not_take_the_spans(fault: str, capsys: pytest.CaptureFixture[str]) -> None:
    timeout = 1.0
    total = otlp.span_count(request_phases(Session(load(LIVE))))
    began = time.monotonic()
    if fault == "down":
        url = _closed_port()
        rc = _export(LIVE, url, "--otlp-timeout", str(timeout))
    else:
        with receiver(fault, sleep=4 * timeout) as (url, got):
            rc = _export(LIVE, url, "--otlp-timeout", str(timeout))
        assert got.posts >= 1
        assert fault == "slow" or not got.requests
    took = time.monotonic() - began
    err = capsys.readouterr().err
    assert rc == 1
    # Never a hang (an exporter retrying for a minute): one batch's timeout, plus loading the trace
    # and its analysis, which on a loaded 2-core machine took up to 4 s.
    assert took < 2 * timeout + 10
    assert f"OTLP collector {url}/v1/traces: " in err
    assert f"sent 0 spans, dropped {total}" in err
    assert {
        "down": "connection refused",
        "unavailable": "HTTP 503 Service Unavailable",
        "slow": "no answer within 1 s",
    }[fault] in err


def test_a_collector_that_stops_taking_spans_midway() -> None:
    phases = request_phases(Session(load(LIVE)))
    res = otlp.resource("e", {}, "t")
    with receiver("once") as (url, got):
        done = send(otlp.batches(phases, res, "e", "run", size=5), otlp.span_count(phases), url, timeout=0.5)
    first = len(got.spans())
    assert first == otlp.span_count(phases[:5]) and got.posts >= 2
    assert (done.sent, done.dropped) == (first, otlp.span_count(phases) - first)
    assert done.failure is not None and "HTTP 503" in done.failure


def test_bad_arguments_and_a_trace_without_a_wall_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(LIVE), "--otlp", "127.0.0.1:4318"]) == 2
    assert "--otlp '127.0.0.1:4318': not an OTLP/HTTP endpoint" in capsys.readouterr().err
    assert main(["export", str(LIVE), "--otlp", "http://127.0.0.1:4318", "-o", "x.json"]) == 2
    assert "leave out -o and --format" in capsys.readouterr().err
    assert main(["export", str(LIVE)]) == 2
    assert "export needs -o/--output" in capsys.readouterr().err
    lines = LIVE.read_bytes().splitlines()
    header = orjson.loads(lines[0])
    del header["t0"]
    bare = tmp_path / "no_clock.jsonl"
    bare.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]) + b"\n")
    assert main(["export", str(bare), "--otlp-json", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{bare}: line 1: the header has no numeric start_time and t0" in err
    assert not (tmp_path / "x.jsonl").exists()


def test_a_growing_trace_hands_on_each_finished_request_once() -> None:
    session = Session(load(PREEMPT))
    every = request_phases(session)
    done = request_phases(session, finished_only=True)
    assert {p.id for p in done} == {p.id for p in every if p.finished}
    assert request_phases(session, skip={p.id for p in done}) == [p for p in every if not p.finished]


def test_a_trace_without_inputs_starts_each_request_where_it_was_first_listed(tmp_path: Path) -> None:
    """Format 1.0 (no `inputs`): no arrival, no prompt length; the queue starts at the first
    step that listed the request, and the span says so."""
    lines = PREEMPT.read_bytes().splitlines()
    records = [orjson.loads(line) for line in lines]
    for rec in records:
        rec.pop("inputs", None)
    bare = tmp_path / "no_inputs.jsonl"
    bare.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    with receiver() as (url, got):
        assert _export(bare, url) == 0
    trace = Session(load(bare)).trace
    offset = trace.header["start_time"] - trace.header["t0"]
    first = {}
    for i in range(len(trace)):
        rec = trace.step(i)
        for rid in [e[0] for g in ("new", "waiting_demand") for e in rec[g]]:
            first.setdefault(rid, i)
    requests = _by_request(got.spans())
    assert sorted(requests) == sorted(first)
    for rid, spans in requests.items():
        a = _attrs(spans["llm_request"])
        assert a["schedscope.ttft_from"] == "seen" and "gen_ai.usage.prompt_tokens" not in a
        start = (trace.columns["t"][first[rid]] + offset) * 1e9
        assert spans["llm_request"].start_time_unix_nano == pytest.approx(start, abs=2e3)
        assert spans["queue"].start_time_unix_nano == spans["llm_request"].start_time_unix_nano
