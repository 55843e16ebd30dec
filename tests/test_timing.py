"""The step-time model: features against vLLM's own request state, recovery of a known
step-time law injected into a trace recorded on vLLM's real Scheduler, idle gaps and
stalls, refusals, async durations, and `schedscope timing` on the live CPU sample."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tracer.analysis import timing
from tracer.analysis.clock import NoClock, clock_for
from tracer.cli import main
from tracer.render.clock import no_clock_sentence
from tracer.render.timing_report import refusal_sentence
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

LIVE_SAMPLE = str(ROOT / "sample_traces" / "live_cpu_ngram.jsonl")
SHORT_SAMPLE = str(ROOT / "sample_traces" / "dflash_k7_additive.jsonl")

# The known law, ms: what the recovered coefficients must come back as. Each term is
# well above the noise on some steps; decode tokens and requests are the pair the steps
# tell apart least (each decoding request brings 1-4 of the former): with 1% noise their
# worst error over 12 noise seeds was 3.9% and 3.5% (the others under 2%), the held-out
# median APE 0.46-0.88% and its p90 1.3-2.0%.
LAW = {
    "step": 1.0,
    "prefill_tokens": 0.02,
    "decode_tokens": 0.1,
    "requests": 0.4,
    "context_tokens": 0.002,
}
NOISE = 0.01  # multiplicative, seeded: duration * (1 + 0.01 z)
IDLE_MS = 500.0  # the engine waits this long for the late requests
STALL_ROW = 30  # this step is made 10x slower (a host stall)


def _rewrite_times(src: Path, dst: Path, durations_ms: np.ndarray) -> None:
    """The trace at `src` with each step's `t` rebuilt so step i lasts durations_ms[i]."""
    t = 100.0 + np.concatenate([[0.0], np.cumsum(durations_ms[:-1])]) / 1e3
    out, i = [], 0
    for line in src.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["kind"] == "step":
            rec["t"] = float(t[i])
            i += 1
        out.append(orjson.dumps(rec))
    dst.write_bytes(b"\n".join(out) + b"\n")


@pytest.fixture(scope="module")
def law_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Record ngram K=3 on vLLM's real Scheduler (0-3 drafts per request and step, as
    ngram proposes; partial acceptance; a KV cache small enough to preempt; staggered
    arrivals, then a late batch after the engine drained), noting vLLM's own per-step
    truth: prefill/decode tokens, requests and KV context."""
    pytest.importorskip("vllm")
    from vllm.v1.outputs import DraftTokenIds

    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import (
        SAMPLED_TOKEN,
        Driver,
        EngineSpec,
        RequestSpec,
        build_scheduler,
        run_workload,
    )
    from tracer.whatif.scenarios import mixed_accept

    def varying_drafts(self: Driver, out: Any) -> None:
        ids = [r.request_id for r in self.sched.running if not r.is_finished()]
        drafts = [[SAMPLED_TOKEN] * ((self.step_index + i) % (self.num_drafts + 1)) for i in range(len(ids))]
        self.sched.update_draft_token_ids(DraftTokenIds(req_ids=ids, draft_token_ids=drafts))

    tmp = tmp_path_factory.mktemp("law")
    spec = EngineSpec(
        method="ngram", num_speculative_tokens=3, max_num_batched_tokens=256, max_num_seqs=8, num_kv_blocks=48
    )
    requests = [RequestSpec(f"r{i}", 20 + (37 * i) % 300, 8 + (13 * i) % 40, 1 + 3 * i) for i in range(40)]
    requests += [RequestSpec(f"late{i}", 50 + 30 * i, 20, arrival_step=400) for i in range(4)]
    truth: list[tuple[int, int, int, int]] = []

    def schedule(s: Any) -> Any:
        before = {rid: (r.num_computed_tokens, r.num_tokens) for rid, r in s.requests.items()}
        out = s.schedule()
        n = out.num_scheduled_tokens
        # vLLM's state: a request with more than one token to compute is in prefill.
        prefill = sum(k for rid, k in n.items() if before[rid][1] - before[rid][0] > 1)
        context = sum(before[rid][0] for rid in n)
        truth.append((prefill, out.total_num_scheduled_tokens - prefill, len(n), context))
        return out

    recorded = tmp / "recorded.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCHEDSCOPE_TRACE", str(recorded))
        mp.setattr(Driver, "_propose_drafts", varying_drafts)
        sched = build_scheduler(spec, TracingScheduler)
        run_workload(sched, requests, accept=mixed_accept, schedule=schedule)
        sched.shutdown()
    trace = load(recorded)
    cols = np.array(truth, dtype=float)
    x = {"step": 1.0, "prefill_tokens": cols[:, 0], "decode_tokens": cols[:, 1], "requests": cols[:, 2]}
    x["context_tokens"] = cols[:, 3]
    law = sum(c * np.asarray(x[name]) for name, c in LAW.items())
    noisy = law * (1 + NOISE * np.random.default_rng(0).standard_normal(len(law)))
    late = next(i for i, rec in enumerate(trace.steps()) if any(e[0] == "late0" for e in rec["new"]))
    noisy[late - 1] += IDLE_MS  # the interval before the late batch's first step
    noisy[STALL_ROW] *= 10
    timed = tmp / "timed.jsonl"
    _rewrite_times(recorded, timed, noisy)
    return {"trace": load(timed), "truth": cols, "law": law, "late": late}


@pytest.mark.vllm
def test_features_equal_vllms_own_request_state(law_run: dict[str, Any]) -> None:
    trace: Trace = law_run["trace"]
    assert int(trace.columns["n_preempted"].sum()) > 0, "the workload must preempt"
    assert int(trace.columns["spec_tokens"].sum()) > int(trace.columns["sampled_tokens"].sum()) - len(trace)
    f = timing.step_features(trace.steps())
    truth = law_run["truth"]
    assert not f.context_recorded
    for j, name in enumerate(("prefill_tokens", "decode_tokens", "requests", "context_tokens")):
        np.testing.assert_array_equal(f.columns[name], truth[:, j], err_msg=name)


@pytest.mark.vllm
def test_fit_recovers_a_known_step_time_law(law_run: dict[str, Any]) -> None:
    trace: Trace = law_run["trace"]
    fit = timing.fit(trace)
    d = fit.durations
    # The wait for the late batch is an idle gap. So is any interval after which nothing
    # was left to run and new requests came (here r1 arriving as r0 finished): from the
    # timestamps alone a wait cannot be told from none, so such intervals are left out.
    idle = np.flatnonzero(d.status == timing.IDLE)
    assert law_run["late"] - 1 in idle
    records = trace.steps()
    for i in idle:
        after = records[i + 1]
        assert after["new"] and not after["running"] and not after["resumed"], f"step {i + 1}"
    assert len(idle) <= 3
    assert list(fit.stalls) == [STALL_ROW]
    coef, se = fit.model.coef, fit.stderr
    print({k: f"{v:.6f} ± {se[k]:.6f}" for k, v in coef.items()}, fit.dropped)
    for name, want in LAW.items():
        assert coef[name] == pytest.approx(want, rel=0.05), name
        assert abs(coef[name] - want) < 4 * se[name], f"{name}: the standard error must cover the truth"
    dropped = {drop.feature: drop.why for drop in fit.dropped}
    assert dropped["query_rows"] == "constant"  # ngram has no drafter query pass
    # No finished-request cost in the law: dropped, or zero within its standard error.
    if "finished_requests" in coef:
        assert abs(coef["finished_requests"]) < 4 * se["finished_requests"] < 0.1 * LAW["requests"]
    else:
        assert "finished_requests" in dropped
    # Held-out error at the noise level (1%: median |z| 0.67%, p90 1.64%).
    median, p90 = np.median(fit.heldout_ape), np.percentile(fit.heldout_ape, 90)
    print(f"held out {len(fit.test)} steps: median APE {median:.2f}%, p90 {p90:.2f}%")
    assert len(fit.test) == (len(fit.test) + len(fit.train)) // timing.HOLDOUT_EVERY
    assert median < 1.0 and p90 < 2.5
    # The replay's path: one record at a time through a FeatureBuilder.
    builder = timing.FeatureBuilder()
    one_by_one = [fit.model.predict(builder.add(rec)) for rec in trace.steps()]
    np.testing.assert_allclose(one_by_one, fit.predicted)
    # A step given by its counts alone: the per-step term is implied.
    x = {"decode_tokens": 8, "requests": 4}
    assert fit.model.predict(x) == pytest.approx(
        coef["step"] + 8 * coef["decode_tokens"] + 4 * coef["requests"]
    )
    busy = fit.durations.status == timing.USABLE
    np.testing.assert_allclose(fit.predicted[busy], law_run["law"][busy], rtol=0.02)
    assert timing.TimingModel.from_dict(fit.model.to_dict()) == fit.model


@pytest.mark.vllm
def test_cli_reports_the_idle_gap_and_the_stall(law_run: dict[str, Any], capsys: Any) -> None:
    assert main(["timing", law_run["trace"].path]) == 0
    out = capsys.readouterr().out
    idle = int((timing.step_durations(law_run["trace"]).status == timing.IDLE).sum())
    assert f"left out: {idle} idle gap" in out and "(waiting for requests)" in out
    stall = f"stalls     1 step over 3× the predicted time, left out of fit and error: step {STALL_ROW + 1} "
    assert stall in out
    assert "dropped query_rows: zero on every fitted step" in out


def _synthetic(tmp_path: Path, steps: list[dict[str, Any]], *, async_scheduling: bool = False) -> Path:
    header = {
        "kind": "header",
        "schema": "1.0",
        "t0": 0.0,
        "config": {
            "max_num_batched_tokens": 64,
            "max_num_scheduled_tokens": 64,
            "async_scheduling": async_scheduling,
        },
    }
    lines = [header]
    for i, s in enumerate(steps):
        used = sum(e[1] for e in s.get("new", []) + s.get("running", []))
        lines.append(
            {
                "kind": "step",
                "step": i + 1,
                "target": {"cap": 64, "used": used, "left": 64 - used},
                "input": {"cap": 64, "used": used, "reserved": 0, "left": 64 - used},
                **s,
            }
        )
    path = tmp_path / "synthetic.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    return path


def test_refuses_a_short_trace_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(timing.TimingRefused) as err:
        timing.fit(load(SHORT_SAMPLE))
    assert err.value.what == "too short"
    back = pickle.loads(pickle.dumps(err.value))  # from a worker process
    assert (back.what, back.counts) == (err.value.what, err.value.counts)
    said = refusal_sentence(err.value.what, err.value.counts)  # the facts, worded by render
    assert said == (
        "too short to fit a step-time model: 7 steps recorded, 6 usable, 1 without a later timestamp; "
        "it needs at least 20 usable steps (a measured duration, something scheduled, no wait for requests)"
    )
    assert main(["timing", SHORT_SAMPLE]) == 1  # refused, measurements still printed
    out = capsys.readouterr().out
    assert f"model      refused: {said}" in out
    assert "throughput prompt" in out and "TTFT p50" in out


def test_a_single_step_or_none_is_too_short_not_too_idle(tmp_path: Path, capsys: Any) -> None:
    one = [{"t": 1.0, "running": [["a", 1, 0, 1]], "num_running": 1, "sampled": {"a": 1}}]
    with pytest.raises(timing.TimingRefused) as err:
        timing.fit(load(_synthetic(tmp_path, one)))
    said = refusal_sentence(err.value.what, err.value.counts)
    assert re.match(r"^too short .*: 1 step recorded, 0 usable, 1 without", said)
    # Nothing measured to price a replay with: NoClock keeps the path and the refusal's facts.
    with pytest.raises(NoClock) as none:
        clock_for(load(_synthetic(tmp_path, one)))
    path = str(tmp_path / "synthetic.jsonl")
    assert no_clock_sentence(none.value) == f"{path}: no measured step to price a replay with ({said})"
    assert main(["timing", str(_synthetic(tmp_path, []))]) == 1
    assert "model      refused: the trace has no steps" in capsys.readouterr().out


def test_refuses_a_trace_that_mostly_waited(tmp_path: Path) -> None:
    """30 one-token requests, each arriving after the previous one finished: every interval
    is a wait for the next arrival, none measures a step."""
    steps = [
        {
            "t": 10.0 * i,
            "new": [[f"r{i}", 8, 0, 8]],
            "finished": [f"r{i - 1}"] if i else [],
            "num_running": 1,
            "sampled": {f"r{i}": 1},
        }
        for i in range(30)
    ]
    trace = load(_synthetic(tmp_path, steps))
    d = timing.step_durations(trace)
    assert d.count(timing.IDLE) == 29 and d.count(timing.USABLE) == 0
    refusal = r"^too idle to fit a step-time model: 30 steps recorded, 0 usable, 29 idle gaps"
    with pytest.raises(timing.TimingRefused) as err:
        timing.fit(trace)
    assert re.match(refusal, refusal_sentence(err.value.what, err.value.counts))


def test_async_durations_are_the_interval_a_steps_forward_fills(tmp_path: Path) -> None:
    t = [0.0, 0.001, 0.011, 0.031, 0.061]
    steps = [{"t": x, "running": [["a", 1, 0, 1]], "num_running": 1, "sampled": {"a": 1}} for x in t]
    sync = timing.step_durations(load(_synthetic(tmp_path, steps)))
    np.testing.assert_allclose(sync.ms[:4], [1, 10, 20, 30])
    lagged = timing.step_durations(load(_synthetic(tmp_path, steps, async_scheduling=True)))
    assert lagged.lag == 1
    np.testing.assert_allclose(lagged.ms[:3], [10, 20, 30])
    assert list(lagged.status[3:]) == [timing.LAST, timing.LAST]
    np.testing.assert_allclose(lagged.end[:3], t[2:])


def test_collinear_and_constant_features_are_dropped_with_the_reason() -> None:
    rng = np.random.default_rng(1)
    n = 60
    requests = rng.integers(1, 9, n).astype(float)
    cols = {
        "step": np.ones(n),
        "prefill_tokens": rng.integers(0, 200, n).astype(float),
        "decode_tokens": requests.copy(),  # one token per request: indistinguishable
        "requests": requests,
        "finished_requests": np.zeros(n),
        "context_tokens": rng.integers(0, 4000, n).astype(float),
        "query_rows": 8 * requests,
    }
    y = 1.0 + 0.01 * cols["prefill_tokens"] + 0.2 * requests + 0.001 * cols["context_tokens"]
    names = list(timing.FEATURES)
    kept, coef, _, dropped = timing._select(np.column_stack([cols[k] for k in names]), names, y)
    why = {d.feature: (d.why, d.other) for d in dropped}
    assert kept == ["step", "prefill_tokens", "decode_tokens", "context_tokens"]
    assert why["requests"] == ("collinear", "decode_tokens")
    assert why["query_rows"] == ("collinear", "decode_tokens")
    assert why["finished_requests"] == ("constant", None)
    np.testing.assert_allclose(coef, [1.0, 0.01, 0.2, 0.001], rtol=1e-6)


def test_timing_on_the_live_cpu_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["timing", LIVE_SAMPLE]) == 0
    out = capsys.readouterr().out
    assert "(52 steps; a step lasts from its schedule() call to the next)" in out
    assert "durations  51 usable steps; left out: 1 without a later timestamp" in out
    assert "model      step duration (ms), fitted on 40 steps =" in out
    assert "per request reported finished in the step" in out
    assert "held out 10 steps (every 5th usable)" in out
    # The first forward pass (warm-up) is the one stall.
    assert "stalls     1 step over 3× the predicted time, left out of fit and error: step 1 1,333.1 ms" in out
    assert "latency    12 requests;" in out

    assert main(["timing", LIVE_SAMPLE, "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    trace = load(LIVE_SAMPLE)
    m, tp = doc["model"], doc["throughput"]
    assert doc["refused"] is None and m["fitted_steps"] + m["heldout_steps"] == 50
    assert [s["step"] for s in m["stalls"]] == [1]
    assert m["heldout_ape_pct"]["median"] < 25 and m["heldout_ape_pct"]["p90"] < 50
    tot = m["heldout_total_ms"]
    assert tot["predicted"] == pytest.approx(tot["measured"], rel=0.10)
    # Measurements straight from the trace.
    t = trace.columns["t"]
    assert tp["busy_s"] == pytest.approx(t[-1] - t[0])  # no idle gap in this run
    assert tp["output_tokens"] == int(trace.columns["sampled_tokens"][:-1].sum())
    assert tp["output_tok_s"] == pytest.approx(tp["output_tokens"] / tp["busy_s"])
    assert tp["target_steps"] == 51 and tp["requests_measured"] == 12
    assert tp["ttft_ms"]["p50"] <= tp["ttft_ms"]["p90"] <= tp["ttft_ms"]["p99"]
    # The stall-free figures leave out exactly step 1's 1,333 ms.
    assert tp["without_stalls"]["busy_s"] == pytest.approx(tp["busy_s"] - (t[1] - t[0]))


@pytest.mark.parametrize("name", ["live_cpu_ngram.jsonl", "ngram_preempt.jsonl"])
def test_step_durations_label_every_status(name: str) -> None:
    """A gap in the step numbers, a clock that went back, an empty step and an idle wait each
    get their label, as a step-by-step reading of the definitions gives them."""
    from tracer.trace.reader import load

    trace = load(ROOT / "sample_traces" / name)
    col = trace.columns
    n = len(trace)
    col["step"][n // 2 :] += 3  # `attach --save` lost three steps here
    col["t"][n // 3] = col["t"][n // 3 - 1] - 0.001  # the clock went back
    col["target_used"][n // 4] = 0  # a step that scheduled nothing
    d = timing.step_durations(trace)
    lag, idle = d.lag, timing.idle_intervals(trace)
    want = []
    for i in range(n):
        j = i + lag  # the interval this step's work fills
        if j >= n - 1:
            label = timing.LAST
        elif col["step"][j + 1] - col["step"][j] != 1:
            label = timing.GAP
        elif idle[j]:
            label = timing.IDLE
        elif col["t"][j + 1] > col["t"][j]:
            label = timing.EMPTY if col["target_used"][i] == 0 else timing.USABLE
        else:
            label = timing.BAD
        want.append(label)
    assert d.status.tolist() == want
    assert {timing.GAP, timing.BAD, timing.EMPTY, timing.LAST} <= set(want)
