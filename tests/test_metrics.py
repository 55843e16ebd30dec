"""Prometheus metrics from the tracer's counters (tracer.live.metrics), on vLLM's real Scheduler offline.

The live CPU server's /metrics is scraped in tests/test_live_server.py.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.stream_support import records
from tracer.trace.reader import load
from tracer.whatif.offline import build_scheduler, run_workload
from tracer.whatif.scenarios import SCENARIOS, mixed_accept

pytestmark = pytest.mark.vllm


def scrape(url: str) -> dict[str, Any]:
    """{sample name with its non-identity labels: value} from a /metrics page, parsed
    with prometheus_client's own parser; identity labels (model_name, engine) under "_labels"."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, Any] = {"_labels": set()}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            out["_labels"].add((labels.pop("model_name", None), labels.pop("engine", None)))
            key = s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(labels.items()))
            out[key] = s.value
    return out


def expected_from_trace(path: Path) -> dict[str, float]:
    """What the counters must read for a whole trace, computed by `schedscope flags`' code."""
    from tracer.analysis import step_bindings, why
    from tracer.analysis.budget import analyze
    from tracer.analysis.flags import KINDS, detect
    from tracer.analysis.reasons import CODES

    trace = load(path)
    analysis = analyze(trace)
    report = detect(trace, analysis)
    col = trace.columns
    counts = report.counts()
    out = {
        "schedscope_steps_total": len(trace),
        "schedscope_target_tokens_scheduled_total": int(col["target_used"].sum()),
        "schedscope_draft_slot_rows_reserved_total": int(analysis.reserved.sum()),
        "schedscope_draft_slot_rows_needed_total": int(analysis.needed.sum()),
        "schedscope_tokens_withheld_total": report.tokens_withheld,
        "schedscope_query_rows_total": int(analysis.query_rows.sum()),
        "schedscope_records_dropped_total": (trace.footer or {}).get("records_dropped", 0),
        "schedscope_target_budget_utilization_count": len(trace),
    }
    out.update({f"schedscope_flags_total{{kind={k}}}": counts.get(k, 0) for k in KINDS})
    # The "why" counters, by `schedscope why`'s code; the triggers add up to the preemptions.
    triggers = why.preemption_triggers(trace)
    assert sum(triggers.values()) == int(col["n_preempted"].sum())
    out.update({f"schedscope_preemptions_total{{trigger={k}}}": triggers.get(k, 0) for k in why.TRIGGERS})
    waiting = step_bindings.waiting_by_reason(trace, step_bindings.bindings(trace))
    assert sum(waiting.values()) == int(step_bindings.waiting_weights(trace).sum())
    out.update({f"schedscope_waiting_request_steps_total{{reason={k}}}": waiting.get(k, 0) for k in CODES})
    return out


def assert_totals_equal(scraped: dict[str, Any], trace_path: Path) -> None:
    want = expected_from_trace(trace_path)
    got = {k: scraped.get(k) for k in want}
    assert got == want


def _vllm_minor() -> tuple[int, int]:
    import vllm

    major, minor = vllm.__version__.split(".")[:2]
    return int(major), int(minor)


def test_withheld_tokens_counter_on_dflash(trace_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DFlash K=7 on 0.32: 7 slots withheld in each of 4 steps, 28 tokens; 0.33 charges none."""
    from tracer.scheduler import TracingScheduler

    monkeypatch.setenv("SCHEDSCOPE_METRICS", "127.0.0.1:0")
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the counters beside the writer thread
    spec, requests = SCENARIOS["dflash_k7"]
    sched = build_scheduler(spec, TracingScheduler)
    server = sched._schedscope_live.metrics_server
    assert server is not None and server.url.startswith("http://127.0.0.1:")
    try:
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()  # the footer: records dropped is final
        scraped = scrape(server.url)
    finally:
        server.close()
    withheld = 28 if _vllm_minor() < (0, 33) else 0
    assert scraped["schedscope_tokens_withheld_total"] == withheld
    assert scraped["schedscope_flags_total{kind=additive-double-reservation}"] == (4 if withheld else 0)
    assert scraped["_labels"] == {("schedscope-offline-llama", "0")}
    assert_totals_equal(scraped, trace_env)
    hist = scraped["schedscope_target_budget_utilization_bucket{le=+Inf}"]
    assert hist == scraped["schedscope_steps_total"] > 0


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_metrics_equal_the_trace_in_small_batches(name: str, trace_env: Path) -> None:
    """Counted batch by batch, as the writer hands them over (a step's runner records
    may arrive in an earlier batch than the step), the counters equal the whole trace's."""
    from tracer.live.metrics import TraceMetrics

    spec, requests = SCENARIOS[name]
    from tracer.scheduler import TracingScheduler

    sched = build_scheduler(spec, TracingScheduler)
    run_workload(sched, requests, accept=mixed_accept)
    sched.shutdown()
    lines = trace_env.read_bytes().splitlines(keepends=True)
    m = TraceMetrics(interval=0.0)
    for i in range(0, len(lines), 3):
        m.tap(records(lines[i : i + 3]))
    m.update()
    from prometheus_client.parser import text_string_to_metric_families

    scraped: dict[str, Any] = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            extra = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
            scraped[s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(extra.items()))] = s.value
    want = expected_from_trace(trace_env)
    want["schedscope_records_dropped_total"] = 0  # no writer behind this one
    assert {k: scraped.get(k) for k in want} == want


def test_bad_metrics_address_logs_and_keeps_tracing(
    trace_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tracer.scheduler import TracingScheduler

    monkeypatch.setenv("SCHEDSCOPE_METRICS", "10.1.2.3:9")  # not loopback, no token: refused
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the counters beside the writer thread
    spec, requests = SCENARIOS["dspark_k4"]
    sched = build_scheduler(spec, TracingScheduler)
    assert sched._schedscope is not None and sched._schedscope_live.metrics_server is None
    assert "cannot serve metrics" in caplog.text
    run_workload(sched, requests, accept=mixed_accept)
    sched.shutdown()
    assert load(trace_env).footer["records_dropped"] == 0


def test_grafana_panel_and_readme_name_real_metrics() -> None:
    """The panel JSON parses, and every schedscope_ series it or the README queries exists."""
    import json
    import re

    from tracer.live.metrics import TraceMetrics

    root = Path(__file__).resolve().parent.parent
    panel = json.loads((root / "docs" / "grafana-panel.json").read_text())
    exprs = " ".join(t["expr"] for t in panel["targets"]) + (root / "README.md").read_text()
    served = TraceMetrics().render().decode()
    for name in set(re.findall(r"schedscope_[a-z_]+", exprs)):
        if name.endswith("_"):  # an abbreviation in prose, e.g. `…_needed_total`
            continue
        assert re.search(rf"^(# TYPE )?{name}[{{ ]", served, re.M), name


def test_docs_metrics_names_every_served_series_and_no_other() -> None:
    """docs/metrics.md's table has a row for every series the registry serves, and names none
    it does not serve."""
    import re

    from tracer.live.metrics import TraceMetrics

    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    rows = [line.split("|")[1] for line in doc.splitlines() if line.startswith("| `schedscope_")]
    documented = {name for row in rows for name in re.findall(r"`(schedscope_[a-z_]+)[`{]", row)}
    served = set(re.findall(r"^# TYPE (schedscope_[a-z_]+) ", TraceMetrics().render().decode(), re.M))
    assert documented == served
    assert set(re.findall(r"(schedscope_[a-z_]+)", doc)) <= served


def test_stream_serves_metrics_unless_turned_off(trace_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With SCHEDSCOPE_STREAM alone the stream server answers /metrics; SCHEDSCOPE_METRICS=off
    turns the counting off altogether (the stream then answers 404 there)."""
    import urllib.error

    from tracer.scheduler import TracingScheduler

    spec, requests = SCENARIOS["dspark_k4"]
    monkeypatch.setenv("SCHEDSCOPE_STREAM", "127.0.0.1:0")
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the counters beside the writer thread
    for setting in ("", "off"):
        monkeypatch.setenv("SCHEDSCOPE_METRICS", setting)
        sched = build_scheduler(spec, TracingScheduler)
        server = sched._schedscope_stream
        url = server.url.replace("/trace", "/metrics")
        try:
            run_workload(sched, requests, accept=mixed_accept)
            sched.shutdown()
            if setting == "off":
                assert sched._schedscope_live.metrics is None
                with pytest.raises(urllib.error.HTTPError) as err:
                    scrape(url)
                assert err.value.code == 404
            else:
                assert sched._schedscope_live.metrics_server is None  # no port of its own
                assert_totals_equal(scrape(url), trace_env)
        finally:
            server.close()
