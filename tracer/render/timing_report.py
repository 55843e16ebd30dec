"""`schedscope timing`: the step-time model, its held-out error and the measured
throughput of one trace, as a JSON-able dict (timing_report) and as the lines the
CLI prints (timing_lines). Every sentence the command prints is here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracer.analysis import client_ttft, timing
from tracer.analysis.step_features import step_pass
from tracer.analysis.throughput import BASIS_LOWER_BOUND, Latency, Throughput, measure_throughput
from tracer.render.text import TTFT_FROM_SENTENCE, ttft_parts_phrase
from tracer.trace.schema import OFFLINE_MODEL_NAME
from tracer.trace.trace_type import Trace

MANY_STALLS = 0.05  # over this share of usable steps, stalls suggest a cost the model lacks


def drop_sentence(drop: timing.Drop) -> str:
    """Why the fit left a feature out."""
    if drop.why == "constant":
        what = "zero" if drop.value == 0 else f"{drop.value:g}"
        return f"{what} on every fitted step (its cost is in the per-step term)"
    if drop.why == "rare":
        steps = "1 fitted step" if drop.value == 1 else f"{drop.value:.0f} fitted steps"
        return f"differs from {drop.other} on {steps} only: too few to price it (needs {timing.MIN_SUPPORT})"
    if drop.why == "collinear":
        return f"collinear with {drop.other} (R² {drop.value:.3f}): the steps cannot tell them apart"
    if drop.why == "too few":
        return f"too few fitted steps for it ({drop.value:.0f}; {timing.STEPS_PER_COEF} per coefficient)"
    return f"fitted negative ({drop.value:.3g} ms): more of it cannot make a step faster"


def refusal_sentence(what: str, counts: dict[str, int]) -> str:
    """Why there is no model, with the step counts behind it (tracer.analysis.timing.TimingRefused's
    facts): `timing` prints it, and a median clock's `refused` keeps it (tracer.render.clock)."""
    recorded = counts["recorded"]
    steps = f"{recorded} step" if recorded == 1 else f"{recorded:,} steps"
    parts = [f"{steps} recorded", f"{counts['usable']} usable"]
    for key, label in (
        ("idle", "idle gaps"),
        ("gap", "across missing steps"),
        ("empty", "scheduled nothing"),
        ("stall", "stalls"),
        ("last", "without a later timestamp"),
    ):
        if counts.get(key):
            parts.append(f"{counts[key]} {label}")
    return (
        f"{what} to fit a step-time model: {', '.join(parts)}; it needs at least {timing.MIN_FIT_STEPS} "
        "usable steps (a measured duration, something scheduled, no wait for requests)"
    )


def client_mismatch_sentence(exc: client_ttft.ClientMismatch) -> str:
    """Why `timing --client`'s result cannot be split against the trace (after its prefix)."""
    if exc.why == client_ttft.NOT_DETAILED:
        return "the client's result has no per-request ttfts and start_times (--save-detailed)"
    if exc.why == client_ttft.NO_ARRIVALS:
        return f"{exc.path}: the trace records no arrival times to split a client's TTFT at"
    if exc.why == client_ttft.SEVERAL_RUNS:
        runs = f"{len(exc.prefixes)} bench runs ({', '.join(exc.prefixes)})"
        return f"{exc.path}: requests of {runs}: name the result's --request-id-prefix"
    if exc.why == client_ttft.NONE_MATCHED:
        return f"{exc.path}: no request of the client's result is in the trace"
    return (
        f"{exc.path}: the client's clock is not the trace's (a part below -1 ms): was the client "
        "on another host?"
    )


def _pct(values: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(values)), "p90": float(np.percentile(values, 90))}


def _steps(rows: np.ndarray, trace: Trace) -> list[int]:
    return [int(s) for s in trace.columns["step"][rows]]


def _model_doc(fit: timing.Fit, trace: Trace) -> dict[str, Any]:
    y = fit.durations.ms
    pred = fit.predicted
    x = fit.features.columns
    train = fit.train
    mean_ms = float(y[train].mean())
    return {
        "coefficients_ms": dict(fit.model.coef),
        "stderr_ms": dict(fit.stderr),
        "units": {name: timing.UNITS[name] for name in fit.model.coef},
        # Mean contribution of each term over the fitted steps, as a share of their mean duration.
        "share_of_fitted_time": {
            name: float(c * x[name][train].mean()) / mean_ms for name, c in fit.model.coef.items()
        },
        "dropped": [{"feature": d.feature, "why": d.why, "reason": drop_sentence(d)} for d in fit.dropped],
        "context": "recorded" if fit.features.context_recorded else "estimated",
        "fitted_steps": len(train),
        "heldout_steps": len(fit.test),
        "heldout_ape_pct": _pct(fit.heldout_ape),
        "fitted_ape_pct": _pct(fit.train_ape),
        "heldout_total_ms": {"measured": float(y[fit.test].sum()), "predicted": float(pred[fit.test].sum())},
        "stalls": [
            {"step": s, "ms": float(y[i]), "predicted_ms": float(pred[i])}
            for s, i in zip(_steps(fit.stalls, trace), fit.stalls, strict=True)
        ],
    }


def _throughput_doc(tp: Throughput, lat: Latency) -> dict[str, Any]:
    return {
        "busy_s": tp.busy_s,
        "span_s": tp.span_s,
        "idle_s": tp.idle_s,
        "prompt_tok_s_during_prefill": tp.prompt_tok_s,
        "prefill_steps": tp.prefill_steps,
        "prompt_tokens": tp.prompt_tokens,
        "decode_tokens_in_prefill_steps": tp.decode_tokens_in_prefill_steps,
        "output_tok_s": tp.output_tok_s,
        "output_tokens": tp.output_tokens,
        "target_steps_s": tp.target_steps_s,
        "target_steps": tp.target_steps,
        "requests_measured": lat.requests,
        "requests_unmeasured": lat.unmeasured,
        "ttft_from": lat.basis,
        "ttft_lower_bound": BASIS_LOWER_BOUND[lat.basis],
        "ttft_ms": lat.percentiles(lat.ttft_ms),
        "ttft_parts_mean_ms": lat.mean_parts(),
        "tpot_ms": lat.percentiles(lat.tpot_ms),
    }


def timing_report(trace: Trace) -> dict[str, Any]:
    """Everything `schedscope timing` shows, JSON-able; "model" is None when refused."""
    done = step_pass(trace)  # each record parsed once, for the features and the latency
    features = done.features
    durations = timing.step_durations(trace)
    model: dict[str, Any] | None = None
    refused: str | None = None
    fitted: timing.Fit | None = None
    if len(trace):
        try:
            fitted = timing.fit(trace, features)
            model = _model_doc(fitted, trace)
        except timing.TimingRefused as exc:
            refused = refusal_sentence(exc.what, exc.counts)
    else:
        refused = "the trace has no steps"
    notes = []
    if trace.config.get("model") == OFFLINE_MODEL_NAME:
        notes.append(
            "recorded offline (tracer.whatif.offline): no model ran, so these durations are the scheduler's "
            "own time, not forward passes"
        )
    status = {s: durations.count(s) for s in (timing.USABLE, timing.IDLE, timing.GAP, timing.EMPTY)}
    doc: dict[str, Any] = {
        "trace": trace.path,
        "steps": len(trace),
        "async_scheduling": bool(trace.config.get("async_scheduling")),
        "duration_lag": durations.lag,
        "durations": {
            **status,
            "without_next_timestamp": durations.count(timing.LAST),
            "bad_timestamps": durations.count(timing.BAD),
            "idle_steps": _steps(np.flatnonzero(durations.status == timing.IDLE), trace),
        },
        "model": model,
        "refused": refused,
        "notes": notes,
    }
    if len(trace):
        tp = measure_throughput(trace, durations, features)
        doc["throughput"] = _throughput_doc(tp, done.requests.latency(trace, durations))
        if fitted is not None and len(fitted.stalls):
            calm = measure_throughput(trace, durations, features, without=fitted.stalls)
            doc["throughput"]["without_stalls"] = {
                "busy_s": calm.busy_s,
                "prompt_tok_s_during_prefill": calm.prompt_tok_s,
                "output_tok_s": calm.output_tok_s,
                "target_steps_s": calm.target_steps_s,
            }
    return doc


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count:,} {noun}s"


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _spread(p: dict[str, float] | None) -> str:
    if p is None:
        return "n/a"
    return ", ".join(f"{k} {v:,.1f} ms" for k, v in p.items())


def client_doc(trace: Trace, result: dict[str, Any], name: str, prefix: str | None = None) -> dict[str, Any]:
    """A client's TTFT split against the trace's (tracer.analysis.client_ttft), JSON-able."""
    found = client_ttft.split(trace, result, prefix)
    return {
        "result": name,
        "requests": len(found.client_ms),
        "unmatched": found.unmatched,
        "client_ttft_ms": found.percentiles(found.client_ms),
        "trace_ttft_ms": found.percentiles(found.parts_ms["trace"]),
        "parts_mean_ms": {k: float(v.mean()) for k, v in found.parts_ms.items()},
        "parts_p50_ms": {k: float(np.median(v)) for k, v in found.parts_ms.items()},
    }


CLIENT_PART_LABELS = {
    "before_arrival": "before vLLM stamped its arrival",
    "trace": "the trace's TTFT from arrival",
    "way_back": "on the way back to the client",
}


def client_lines(c: dict[str, Any]) -> list[str]:
    unmatched = f"; {c['unmatched']} not in the trace" if c["unmatched"] else ""
    parts = " + ".join(f"{c['parts_mean_ms'][k]:,.1f} {label}" for k, label in CLIENT_PART_LABELS.items())
    mean = sum(c["parts_mean_ms"].values())
    return [
        f"client     {c['result']}: {_n(c['requests'], 'request')} matched by id{unmatched}",
        f"           client TTFT {_spread(c['client_ttft_ms'])}",
        f"           trace  TTFT {_spread(c['trace_ttft_ms'])} (the same requests)",
        f"           client TTFT mean {mean:,.1f} ms = {parts}",
    ]


def timing_lines(doc: dict[str, Any]) -> list[str]:
    """The text report of `schedscope timing`, from timing_report()."""
    d = doc["durations"]
    clock = (
        "async scheduling: step i lasts from schedule() i+1 to i+2, while its forward runs"
        if doc["async_scheduling"]
        else "a step lasts from its schedule() call to the next"
    )
    lines = [f"trace      {doc['trace']} ({_n(doc['steps'], 'step')}; {clock})"]
    left = [
        f"{_n(d['idle'], 'idle gap')} (waiting for requests)" if d["idle"] else "",
        f"{d['gap']} across missing steps" if d["gap"] else "",
        f"{d['empty']} that scheduled nothing" if d["empty"] else "",
        f"{d['without_next_timestamp']} without a later timestamp" if d["without_next_timestamp"] else "",
        f"{d['bad_timestamps']} with a non-increasing timestamp" if d["bad_timestamps"] else "",
    ]
    left_out = "; ".join(x for x in left if x) or "none"
    lines.append(f"durations  {_n(d['usable'], 'usable step')}; left out: {left_out}")
    for note in doc["notes"]:
        lines.append(f"note       {note}")
    m = doc["model"]
    if m is None:
        lines.append(f"model      refused: {doc['refused']}")
    else:
        lines.append(f"model      step duration (ms), fitted on {m['fitted_steps']:,} steps =")
        for i, (name, c) in enumerate(m["coefficients_ms"].items()):
            share = m["share_of_fitted_time"][name]
            sign = "  " if i == 0 else "+ "
            se, unit = m["stderr_ms"][name], m["units"][name]
            lines.append(f"           {sign}{c:9.5f} ± {se:<8.5f} {unit}  ({share:.0%} of a mean step)")
        for drop in m["dropped"]:
            lines.append(f"           dropped {drop['feature']}: {drop['reason']}")
        if m["context"] == "estimated" and "context_tokens" in m["coefficients_ms"]:
            lines.append("           context_tokens: rebuilt from scheduled tokens (the trace records none)")
        h, f = m["heldout_ape_pct"], m["fitted_ape_pct"]
        lines.append(
            f"error      held out {m['heldout_steps']:,} steps (every {timing.HOLDOUT_EVERY}th usable): "
            f"median {h['median']:.1f}%, p90 {h['p90']:.1f}% absolute error; "
            f"on the fitted steps {f['median']:.1f}% / {f['p90']:.1f}%"
        )
        tot = m["heldout_total_ms"]
        bias = 100 * (tot["predicted"] - tot["measured"]) / tot["measured"]
        lines.append(
            f"           held-out steps in all: {tot['predicted']:,.1f} ms predicted, "
            f"{tot['measured']:,.1f} ms measured ({bias:+.1f}%)"
        )
        if m["stalls"]:
            shown = ", ".join(
                f"step {s['step']} {s['ms']:,.1f} ms vs {s['predicted_ms']:,.1f}" for s in m["stalls"][:4]
            )
            more = f" and {len(m['stalls']) - 4} more" if len(m["stalls"]) > 4 else ""
            lines.append(
                f"stalls     {_n(len(m['stalls']), 'step')} over {timing.STALL_FACTOR:g}× the predicted "
                f"time, left out of fit and error: {shown}{more}"
            )
            if len(m["stalls"]) > MANY_STALLS * (d["usable"] or 1):
                lines.append(
                    "           more than a few stalls: the host was busy, or steps cost something the "
                    "model lacks; do not trust its predictions for steps like these"
                )
    tp = doc.get("throughput")
    if tp is None:
        return lines
    lines.append(
        f"throughput prompt {_num(tp['prompt_tok_s_during_prefill'])} tok/s during prefill "
        f"({tp['prompt_tokens']:,} prompt tokens in {tp['prefill_steps']:,} steps, which also ran "
        f"{tp['decode_tokens_in_prefill_steps']:,} decode tokens)"
    )
    lines.append(
        f"           output {_num(tp['output_tok_s'])} tok/s, {_num(tp['target_steps_s'], '{:,.1f}')} "
        f"target steps/s ({tp['output_tokens']:,} tokens, {tp['target_steps']:,} steps in "
        f"{tp['busy_s']:,.3f} s busy; span {tp['span_s']:,.3f} s, {tp['idle_s']:,.3f} s idle)"
    )
    calm = tp.get("without_stalls")
    if calm:
        lines.append(
            f"           without the stalls: prompt {_num(calm['prompt_tok_s_during_prefill'])} tok/s, "
            f"output {_num(calm['output_tok_s'])} tok/s, "
            f"{_num(calm['target_steps_s'], '{:,.1f}')} target steps/s ({calm['busy_s']:,.3f} s busy)"
        )
    unmeasured = (
        f"; {tp['requests_unmeasured']} without a measurable first token" if tp["requests_unmeasured"] else ""
    )
    start = TTFT_FROM_SENTENCE[tp["ttft_from"]]
    lines.append(f"latency    {_n(tp['requests_measured'], 'request')}{unmeasured}; {start}:")
    lines.append(f"           TTFT {_spread(tp['ttft_ms'])}")
    parts = ttft_parts_phrase(tp.get("ttft_parts_mean_ms"))
    if parts:
        lines.append(f"           TTFT mean {sum(tp['ttft_parts_mean_ms'].values()):,.1f} ms = {parts}")
    lines.append(f"           TPOT {_spread(tp['tpot_ms'])}")
    if doc.get("client"):
        lines += client_lines(doc["client"])
    return lines
