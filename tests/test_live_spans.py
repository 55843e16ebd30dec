"""SCHEDSCOPE_OTLP: a running server's requests as OpenTelemetry spans, sent from the trace process
to a real OTLP/HTTP receiver (tests/otlp_support.py) while vLLM's real Scheduler runs. The spans
are the ones `schedscope export --otlp` makes of the trace written (the same ids: a backend keeps
one copy), each request once; a collector that is down or slow costs schedule() nothing, leaves
the trace as it is without one, and its dropped spans are counted."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import ROOT
from tests.otlp_support import receiver
from tests.test_otlp import _attrs, _closed_port
from tests.test_trace_process import comparable
from tracer.analysis.request_phases import request_phases
from tracer.analysis.session import Session
from tracer.cli import main
from tracer.live.metrics import TraceMetrics
from tracer.live.spans import LiveSpans
from tracer.record.config import RecorderConfig
from tracer.record.writer import Record
from tracer.render import otlp
from tracer.trace.reader import load

SAMPLES = ROOT / "sample_traces"
SCENARIO = "ngram_preempt"
PACE_S = 0.03  # a pause after each step: the run outlasts a few of the spans' builds (1 s apart)


def stream_of_requests() -> list[Any]:
    """A steady stream of short requests (a request every 3 steps), as a server sees for hours:
    requests come and go, and finish while the run goes on."""
    from tracer.whatif.offline import RequestSpec

    return [RequestSpec(f"s{i}", 40 + 7 * (i % 5), 6 + i % 4, arrival_step=1 + 3 * i) for i in range(40)]


def _sorted(spans: list[Any]) -> list[Any]:
    return sorted(spans, key=lambda s: (s.trace_id, s.span_id))


def _exported(path: Path) -> tuple[list[Any], list[Any]]:
    """`schedscope export PATH --otlp` to a receiver of its own: (its spans, its resources)."""
    with receiver() as (url, got):
        assert main(["export", str(path), "--otlp", url]) == 0
    return _sorted(got.spans()), _resources(got)


def _resources(got: Any) -> list[Any]:
    return [rs.resource for r in got.requests for rs in r.resource_spans]


def _records(path: Path) -> list[Record]:
    out = []
    for line in path.read_bytes().splitlines(keepends=True):
        row = orjson.loads(line)
        out.append(Record(row["kind"], row.get("step", -1), line))
    return out


@pytest.fixture(scope="module")
def request_stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of vLLM's real Scheduler (SCENARIO's engine) serving `stream_of_requests`."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    path = tmp_path_factory.mktemp("stream") / "stream.jsonl"
    spec, _ = SCENARIOS[SCENARIO]
    requests = stream_of_requests()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCHEDSCOPE_TRACE", str(path))
        mp.setenv("SCHEDSCOPE_WRITER", "thread")
        mp.delenv("SCHEDSCOPE_OTLP", raising=False)
        sched = build_scheduler(spec, TracingScheduler)
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()
    return path


@pytest.mark.parametrize("name", ["stream", "ngram_preempt.jsonl", "priority_preempt.jsonl"])
def test_spans_built_step_by_step_are_the_exported_spans(name: str, request_stream: Path) -> None:
    """Records handed over one at a time and a build after each: every request's spans are the
    export's, once, and on a stream of requests the records kept stay a few requests' worth."""
    path = request_stream if name == "stream" else SAMPLES / name
    records = _records(path)
    steps = sum(r.kind == "step" for r in records)
    with receiver() as (url, got):
        live = LiveSpans(url, path=str(path), engine="0", interval=3600)
        widest = 0
        for record in records:
            live.tap([record])
            live.build()
            widest = max(widest, live.window_steps)
        live.close()
    exported, resources = _exported(path)
    assert _sorted(got.spans()) == exported
    assert all(r == resources[0] for r in [*resources, *_resources(got)])
    roots = Counter(_attrs(s)["gen_ai.request.id"] for s in got.spans() if s.name == "llm_request")
    assert set(roots.values()) == {1} and len(roots) == live.requests > 1
    assert (live.sent, live.dropped) == (len(exported), 0)
    if name == "stream":  # requests come and go: the window moves on with them
        assert steps > 100 and widest < steps / 4


def test_requests_open_past_the_bound_are_given_up_and_counted(request_stream: Path) -> None:
    """A window bound smaller than what the open requests need: the oldest are given up, their
    spans so far counted dropped; the others are still sent as exported, none twice."""
    path = request_stream
    records = _records(path)
    with receiver() as (url, got):
        live = LiveSpans(url, path=str(path), engine="0", interval=3600, max_window=6000)
        for record in records:
            live.tap([record])
            live.build()
        live.close()
    exported = {(s.trace_id, s.span_id): s for s in _exported(path)[0]}
    sent = got.spans()
    assert 0 < len(sent) < len(exported) and live.dropped > 0
    assert all(exported[(s.trace_id, s.span_id)] == s for s in sent)
    assert len(sent) == live.sent and live.sent + live.dropped <= len(exported)


def test_the_counters_on_metrics_count_what_a_down_collector_did_not_take() -> None:
    path = SAMPLES / "ngram_preempt.jsonl"
    live = LiveSpans(_closed_port(), path=str(path), engine="0", interval=3600, timeout=0.5)
    metrics = TraceMetrics()
    metrics.spans_source = live
    for tap in (live.tap, metrics.tap):
        tap(_records(path))
    live.close()
    total = otlp.span_count(request_phases(Session(load(path))))
    assert (live.sent, live.dropped) == (0, total) and live.failure is not None
    text = metrics.render().decode()
    rows = [line for line in text.splitlines() if line.startswith("schedscope_otlp_")]
    values = {line.split("{")[0]: float(line.split()[-1]) for line in rows}
    assert values == {"schedscope_otlp_spans_sent_total": 0, "schedscope_otlp_spans_dropped_total": total}
    assert (
        'schedscope_otlp_spans_dropped_total{engine="0",model_name=""} 0.0'
        in TraceMetrics().render().decode()
    )


def test_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    config = RecorderConfig.from_env({"SCHEDSCOPE_OTLP": " http://c:4318 ", "SCHEDSCOPE_OTLP_TIMEOUT": "2"})
    assert (config.otlp, config.otlp_timeout, config.active) == ("http://c:4318", 2.0, True)
    assert RecorderConfig.from_env({"SCHEDSCOPE_OTLP_TIMEOUT": "-1"}).otlp_timeout == 5.0
    assert "SCHEDSCOPE_OTLP_TIMEOUT='-1' is not a positive number" in caplog.text
    assert not RecorderConfig.from_env({}).active


# -- a real TracingScheduler, its trace process sending the spans -------------------------------


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, otlp_url: str | None) -> dict[str, Any]:
    """vLLM's Scheduler on SCENARIO's engine serving `stream_of_requests`, paced, its schedule()
    timed; shut down and its trace process waited for (it sends the last spans after the footer)."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    path = tmp_path / name
    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(path))
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "process")
    monkeypatch.setenv("SCHEDSCOPE_OTLP_TIMEOUT", "1")
    if otlp_url is None:
        monkeypatch.delenv("SCHEDSCOPE_OTLP", raising=False)
    else:
        monkeypatch.setenv("SCHEDSCOPE_OTLP", otlp_url)
    spec, _ = SCENARIOS[SCENARIO]
    requests = stream_of_requests()
    sched = build_scheduler(spec, TracingScheduler)
    slowest = 0.0

    def paced(s: Any) -> Any:
        nonlocal slowest
        t0 = time.monotonic()
        out = s.schedule()
        slowest = max(slowest, time.monotonic() - t0)
        time.sleep(PACE_S)
        return out

    run_workload(sched, requests, accept=mixed_accept, schedule=paced)
    writer = sched._schedscope.writer
    began = time.monotonic()
    sched.shutdown()
    shutdown = time.monotonic() - began
    writer._proc.wait(30)  # the process ends once its last spans are sent or given up
    return {"path": path, "slowest": slowest, "shutdown": shutdown}


def test_a_running_server_sends_what_the_export_makes_of_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiver() as (url, got):
        run = _run(tmp_path, monkeypatch, "t.jsonl", url)
    exported, resources = _exported(run["path"])
    assert _sorted(got.spans()) == exported  # ids, times, attributes, events: all of it
    assert all(r == resources[0] for r in _resources(got))
    roots = Counter(_attrs(s)["gen_ai.request.id"] for s in got.spans() if s.name == "llm_request")
    assert set(roots.values()) == {1} and len(roots) == 40  # every request, once
    assert got.posts > 1  # sent as the requests finished, not all at the end


@pytest.fixture(scope="module")
def without_otlp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        return _run(tmp_path_factory.mktemp("plain"), mp, "plain.jsonl", None)


@pytest.mark.parametrize("fault", ["down", "slow"])
def test_a_collector_that_does_not_take_the_spans_costs_the_server_nothing(
    fault: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    without_otlp: dict[str, Any],
) -> None:
    """Down (a closed port) or slow (answers after 4 s; a batch gets 1 s): schedule() is never
    held up, the trace is the one written without a collector, and every span is counted dropped
    (the trace process's log, which it writes to the server's stderr)."""
    if fault == "down":
        url = _closed_port()
        run = _run(tmp_path, monkeypatch, "t.jsonl", url)
    else:
        with receiver("slow", sleep=4.0) as (url, got):
            run = _run(tmp_path, monkeypatch, "t.jsonl", url)
        assert got.posts >= 1  # it was asked, and did not answer in time
    assert run["slowest"] < 1.0  # below one batch's timeout: the scheduler never waited for one
    assert run["shutdown"] < 6.0  # the shipper's own bound (5 s) and no more
    assert comparable(run["path"]) == comparable(without_otlp["path"])
    total = otlp.span_count(request_phases(Session(load(run["path"]))))
    err = capfd.readouterr().err
    assert f"OTLP collector {url}/v1/traces: " in err  # the first failure, once
    assert err.count(f"OTLP collector {url}/v1/traces: ") == 1
    assert f"OTLP spans of 40 requests: 0 sent to {url}/v1/traces, {total} dropped" in err


def test_a_writer_thread_in_engine_core_sends_no_spans_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SCHEDSCOPE_WRITER=thread: the taps run in EngineCore, which is kept free of the SDK and
    the analysis; the trace is written as ever, no span is sent, and the log says why."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    spec, requests = SCENARIOS[SCENARIO]
    with receiver() as (url, got):
        monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "t.jsonl"))
        monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")
        monkeypatch.setenv("SCHEDSCOPE_OTLP", url)
        sched = build_scheduler(spec, TracingScheduler)
        assert sched._schedscope_live is not None and sched._schedscope_live.spans is None
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()
    assert got.posts == 0
    assert "SCHEDSCOPE_OTLP needs the trace process (SCHEDSCOPE_WRITER=process" in caplog.text
    assert len(load(tmp_path / "t.jsonl")) > 10
