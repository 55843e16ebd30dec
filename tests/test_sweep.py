"""Time-aware replay (replay --timed, --arrivals time), throughput and latency in diff, the
withheld tokens' cost, and `schedscope sweep` on the DFlash and DSpark samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tracer.analysis.clock import clock_for, performance
from tracer.cli import main
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

SAMPLES = ROOT / "sample_traces"
DFLASH = SAMPLES / "dflash_k7_additive.jsonl"
DSPARK = SAMPLES / "dspark_k4_additive.jsonl"

# A known step-time law (ms) and 1% noise, as in tests/test_timing.py.
LAW = {"step": 1.0, "prefill_tokens": 0.02, "decode_tokens": 0.1, "requests": 0.4}
IDLE_MS = 300.0  # the engine waits this long for a late batch
EARLY_S = 1e-4  # a request arrives this long before the schedule() that first sees it


def retime(src: Path, dst: Path, durations_ms: np.ndarray) -> None:
    """`src` with each step lasting durations_ms[i], and each arrival's wall time set just
    before the schedule() it came before, as a live server records them."""
    lines = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    header = lines[0]
    t = header["t0"] + 1.0 + np.concatenate([[0.0], np.cumsum(durations_ms[:-1])]) / 1e3
    i = 0
    for rec in lines:
        if rec["kind"] != "step":
            continue
        rec["t"] = float(t[i])
        for entry in rec["inputs"]:
            if entry[0] == "a":  # wall time = monotonic - t0 + start_time
                entry[5] = float(t[i]) - EARLY_S - header["t0"] + header["start_time"]
        i += 1
    dst.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")


@pytest.fixture(scope="module")
def timed_source(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """A recording on vLLM's real Scheduler (ngram K=3, partial acceptance, staggered arrivals,
    a late batch after the engine drained) whose timestamps follow LAW: long enough to fit."""
    pytest.importorskip("vllm")
    from tracer.analysis.timing import step_features
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import EngineSpec, RequestSpec, build_scheduler, run_workload
    from tracer.whatif.scenarios import mixed_accept

    tmp = tmp_path_factory.mktemp("timed")
    spec = EngineSpec(method="ngram", num_speculative_tokens=3, max_num_batched_tokens=256, max_num_seqs=8)
    requests = [RequestSpec(f"r{i}", 20 + (37 * i) % 300, 8 + (13 * i) % 40, 1 + 3 * i) for i in range(30)]
    requests += [RequestSpec(f"late{i}", 50 + 30 * i, 20, arrival_step=300) for i in range(4)]
    recorded = tmp / "recorded.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCHEDSCOPE_TRACE", str(recorded))
        sched = build_scheduler(spec, TracingScheduler)
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()
    trace = load(recorded)
    x = step_features(trace.steps()).columns
    law = sum(c * x[name] for name, c in LAW.items())
    noisy = law * (1 + 0.01 * np.random.default_rng(1).standard_normal(len(law)))
    late = next(i for i, rec in enumerate(trace.steps()) if any(e[0] == "late0" for e in rec["new"]))
    noisy[late - 1] += IDLE_MS
    timed = tmp / "timed.jsonl"
    retime(recorded, timed, noisy)
    return load(timed)


def _replay(source: Trace, out: Path, **kwargs: Any) -> Trace:
    from tracer.whatif.replay import replay
    from tracer.whatif.replay_clock import attach_frontend_delays, attach_idle_waits
    from tracer.whatif.workload import workload_from_trace

    workload, clock = workload_from_trace(source), clock_for(source)
    attach_idle_waits(workload, source, clock)
    attach_frontend_delays(workload, source)
    replay(workload, "stock", out, clock=clock, **kwargs)
    return load(out)


@pytest.mark.vllm
@pytest.mark.parametrize("arrivals", ["step", "time"])
def test_time_aware_identity(timed_source: Trace, tmp_path: Path, arrivals: str) -> None:
    """Under the recorded policy the replay's predicted time to drain is within the model's
    error of the recorded one; by recorded step it is also the same schedule."""
    from tracer.whatif.fidelity import compare_runs

    clock = clock_for(timed_source)
    assert clock.kind == "fitted"
    replayed = _replay(timed_source, tmp_path / f"{arrivals}.jsonl", arrivals=arrivals)
    info = replayed.header["replay"]
    assert info["timed"] is True and info["arrivals"] == arrivals
    assert info["clock"]["model"]["coefficients_ms"] == clock.model.coef
    t = replayed.columns["t"]
    assert t[0] == timed_source.columns["t"][0] and np.all(np.diff(t) > 0)
    assert replayed.header["t0"] == timed_source.header["t0"]
    rec, rep = performance(timed_source), performance(replayed)
    assert rep.basis == "predicted" and rep.error_pct == pytest.approx(clock.sum_error_pct)
    error = abs(rep.drain_s - rec.drain_s) / rec.drain_s * 100
    print(
        f"arrivals by {arrivals}: drain {rec.drain_s:.4f} s recorded, {rep.drain_s:.4f} s predicted "
        f"({error:.2f}%)"
    )
    print(f"clock: held-out median {clock.heldout_median_pct:.2f}%, summed {clock.heldout_total_pct:+.2f}%")
    assert error <= clock.heldout_median_pct
    assert rep.steps == pytest.approx(rec.steps, abs=2)
    # The late batch waited IDLE_MS in both: the clock jumped to its arrival, not past it.
    assert rep.drain_s * 1e3 > IDLE_MS
    if arrivals == "step":
        f = compare_runs(timed_source, replayed, policy="stock", exact=True, notes=[])
        assert f.identical, f.first


@pytest.mark.vllm
def test_arrivals_by_time_refuses_offline_arrival_times(tmp_path: Path, capsys: Any) -> None:
    code = main(
        ["replay", str(DFLASH), "--arrivals", "time", "--no-identity", "-o", str(tmp_path / "x.jsonl")]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "not a wall time within the run" in err and "--arrivals step" in err


def test_diff_prices_the_withheld_tokens_without_a_model(capsys: Any) -> None:
    """Seven steps cannot fit a model: the extra step is priced at A's measured median prefill step."""
    assert main(["diff", str(DFLASH), str(SAMPLES / "dflash_k7_separate.jsonl")]) == 0
    out = capsys.readouterr().out
    a = load(DFLASH)
    t = a.columns["t"]
    prefill_ms = np.diff(t)[:5] * 1e3  # steps 1-5 compute the 32k prompt; step 6 decodes
    median = float(np.median(prefill_ms))
    share = 100 * median / prefill_ms.sum()
    want = (
        f"The 28 withheld tokens cost one extra step, ≈ {median:,.2f} ms, {share:.0f}% of A's prefill time "
        f"({prefill_ms.sum():,.2f} ms), priced at A's measured median prefill step ({median:,.3f} ms) "
        "(recorded offline: the scheduler's own time, no model ran)."
    )
    assert want in out
    assert "Times: A measured from its own timestamps; B measured from its own timestamps." in out
    for label in (
        "prompt tok/s",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p99 ms",
        "time to drain ms",
    ):
        assert f"\n{label}" in out, label


@pytest.mark.vllm
def test_diff_shows_a_timed_replay_as_predicted(timed_source: Trace, tmp_path: Path, capsys: Any) -> None:
    replayed = _replay(timed_source, tmp_path / "b.jsonl", arrivals="time")
    assert main(["diff", timed_source.path, replayed.path]) == 0
    out = capsys.readouterr().out
    err = clock_for(timed_source).sum_error_pct
    assert f"B predicted (a timed replay: its timestamps are the clock's), ±{err:.1f}% summed" in out
    assert f"error (summed)                     -{f'±{err:.1f}%':>12}" in out


def _sweep(trace: Path, objective: str, workers: int = 1) -> dict[str, Any]:
    from tracer.whatif.sweep import grid, sweep

    return sweep(trace, grid(["additive", "cap", "separate"]), objective=objective, workers=workers)


@pytest.mark.vllm
@pytest.mark.parametrize("objective", ["output_tps", "ttft_p99", "drain"])
def test_sweep_ranks_separate_at_or_above_additive(objective: str) -> None:
    """For the right reason: no withheld tokens, more target tokens per step, and on DFlash's
    32k prefill one step fewer."""
    for path in (DFLASH, DSPARK):
        doc = _sweep(path, objective)
        by = {r["label"]: r for r in doc["results"]}
        sep, add = by["separate"], by["additive"]
        assert sep["rank"] <= add["rank"], (path.name, objective)
        assert add["tokens_withheld"] > 0 and sep["tokens_withheld"] == 0
        assert sep["target_tokens_per_step"] > add["target_tokens_per_step"]
        assert sep["steps"] <= add["steps"]
        assert doc["clock"]["kind"] == "median" and doc["error_pct"] is None  # 7 steps: no model
        if path == DFLASH:
            assert (add["steps"], sep["steps"]) == (6, 5) and (
                add["tokens_withheld"],
                sep["tokens_withheld"],
            ) == (28, 0)
            assert sep["drain_ms"] < add["drain_ms"]
            # One step fewer at one price per step: drain differs by exactly that step.
            step_ms = doc["clock"]["model"]["coefficients_ms"]["step"]
            assert add["drain_ms"] - sep["drain_ms"] == pytest.approx(step_ms)


@pytest.mark.vllm
def test_sweep_cli_table_json_and_plot(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("plotly")
    argv = ["sweep", str(DFLASH), "--policy", "additive,separate", "--max-num-batched-tokens", "4096,8192"]
    html = tmp_path / "sweep.html"
    assert main([*argv, "--objective", "drain", "--workers", "2", "--json", "--plot", str(html)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [r["label"] for r in doc["results"]] == [
        "separate B=8192",
        "additive B=8192",
        "separate B=4096",
        "additive B=4096",
    ]
    assert "sweep [####################] 4/4" in captured.err
    text = html.read_text()
    assert "plotly" in text and "separate" in text and "additive" in text
    assert main([*argv, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "ranked by output tok/s (higher is better)" in out
    assert "every step priced at the source's measured median step" in out
    assert "   1  separate B=8192" in out


def test_a_setting_beyond_the_sources_steps_is_flagged() -> None:
    """A replay whose steps go past what the clock was fitted on says so, and whether the clock
    priced that feature at all: the DFlash sample's steps hold one request, the live trace's
    up to 8, and its clock dropped the per-request term."""
    from tracer.render.sweep_report import sweep_lines
    from tracer.whatif.sweep import extrapolation

    live, one = load(SAMPLES / "live_cpu_ngram.jsonl"), load(DFLASH)
    clock = clock_for(live)
    assert extrapolation(live, live, clock) == []
    beyond = {b["feature"]: b for b in extrapolation(one, live, clock)}
    assert beyond["requests"]["source_max"] == 1 and beyond["requests"]["replay_max"] == 8
    assert beyond["requests"]["priced"] == ("requests" in clock.model.coef)
    doc = {
        "trace": "t", "objective": "drain", "error_pct": 1.0, "arrivals": "time", "clock_sentence": "c",
        "results": [
            {"rank": 1, "label": "stock seqs=16", "steps": 5, "target_tokens_per_step": 1.0,
             "tokens_withheld": 0, "output_tok_s": 1.0, "ttft_p99_ms": 1.0, "drain_ms": 1.0,
             "within_error_of_best": False, "ttft_from": "arrival", "beyond_source": list(beyond.values())},
        ],
    }  # fmt: skip
    text = "\n".join(sweep_lines(doc))
    assert (
        "1.00 ms †" in text and "stock seqs=16: " in text and "requests up to 8 a step (the source: 1" in text
    )


def test_the_sweep_document_words_its_clock_beside_it() -> None:
    """`sweep --json` keeps `clock_sentence` right after `clock`, worded by tracer.render.clock
    from the clock's own facts (a median clock here: the DFlash sample is too short to fit)."""
    from tracer.render.clock import clock_sentence
    from tracer.render.sweep_report import sweep_document
    from tracer.render.timing_report import refusal_sentence

    clock = clock_for(load(DFLASH))
    doc = sweep_document({"trace": "t", "clock": clock.to_dict(), "error_pct": None, "results": []})
    assert list(doc) == ["trace", "clock", "clock_sentence", "error_pct", "results"]
    assert doc["clock_sentence"] == clock_sentence(clock)
    assert doc["clock_sentence"].startswith("every step priced at the source's measured median step")
    # The clock keeps the fit's refusal as facts; the document, as a replay's header does, words it.
    assert clock.refused == {"what": "too short", "counts": clock.refused["counts"]}
    assert doc["clock"]["refused"] == refusal_sentence("too short", clock.refused["counts"])
    assert doc["clock"]["refused"].startswith("too short to fit a step-time model: 7 steps recorded")
