"""Every sentence of `schedscope sweep`: the ranked table, and the error beside its figures.
The web app's Sweep page shows the same lines (web/sweep_figure.py)."""

from __future__ import annotations

from typing import Any

from tracer.analysis.clock import StepClock
from tracer.render.clock import clock_sentence, worded_clock
from tracer.render.command_lines import progress_frame
from tracer.render.text import TTFT_FROM_SENTENCE
from tracer.whatif.sweep import OBJECTIVES


def sweep_document(doc: dict[str, Any]) -> dict[str, Any]:
    """tracer.whatif.sweep's result as `sweep --json` writes it and the Sweep page reads it:
    its clock's refusal worded, and its sentence beside the clock."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out[key] = value
        if key == "clock":
            out[key] = worded_clock(value)
            out["clock_sentence"] = clock_sentence(StepClock.from_dict(value))
    return out


def progress_text(done: int, total: int, label: str) -> str:
    """`sweep`'s progress bar on stderr, a frame redrawn in place: settings done, the last one."""
    bar = "#" * (20 * done // total)
    return progress_frame(f"sweep [{bar:<20}] {done}/{total} {label[:40]:<40}", done, total)


def error_text(err: float | None) -> str:
    if err is None:
        return "error unknown"
    return f"±{err:.2f}%" if err < 1 else f"±{err:.1f}%"


def figure_title(doc: dict[str, Any]) -> str:
    """The sweep figure's title (`sweep --plot`, the web app's Sweep page): what it predicts,
    which way is better, and the clock's error."""
    _, label, _, higher = OBJECTIVES[doc["objective"]]
    err = doc.get("error_pct")
    pm = error_text(err) + ("" if err is None else " (the model's summed error)")
    better = "higher is better" if higher else "lower is better"
    return f"sweep of {doc['trace']}: predicted {label}, {better}; {pm}"


def objective_axis(doc: dict[str, Any]) -> str:
    """The sweep figure's y-axis title: the objective, its unit, predicted."""
    _, label, unit, _ = OBJECTIVES[doc["objective"]]
    return f"{label} ({unit}, predicted)"


def _fmt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def sweep_lines(doc: dict[str, Any]) -> list[str]:
    """The terminal table of `schedscope sweep`, ranked."""
    key, label, unit, higher = OBJECTIVES[doc["objective"]]
    err = doc["error_pct"]
    pm = error_text(err)
    n = len(doc["results"])
    better = "higher" if higher else "lower"
    lines = [
        f"sweep      {doc['trace']}: {n} settings, ranked by {label} ({better} is better)",
        f"clock      {doc['clock_sentence']}",
        "           figures are predictions, "
        + (
            "error unknown (no model, no held-out error)"
            if err is None
            else f"{pm} (the clock's summed error)"
        )
        + f"; arrivals by recorded {doc['arrivals']}",
        *(
            f"ttft       predicted {TTFT_FROM_SENTENCE[start]}"
            for start in sorted({r.get("ttft_from", "seen") for r in doc["results"]})
        ),
        "",
        f"{'rank':>4}  {'setting':<34}{'steps':>7}{'tok/step':>10}{'withheld':>9}{'out tok/s':>11}"
        f"{'TTFT p99 ms':>13}{'drain ms':>11}  {label} ({pm})",
    ]
    for r in doc["results"]:
        mark = " ≈ best" if r["within_error_of_best"] and r["rank"] > 1 else ""
        mark += " †" if r.get("beyond_source") else ""
        lines.append(
            f"{r['rank']:>4}  {r['label']:<34}{r['steps']:>7,}{r['target_tokens_per_step']:>10,.1f}"
            f"{r['tokens_withheld']:>9,}{_fmt(r['output_tok_s'], '{:,.0f}'):>11}"
            f"{_fmt(r['ttft_p99_ms'], '{:,.2f}'):>13}{r['drain_ms']:>11,.2f}  "
            f"{_fmt(r[key], '{:,.2f}')} {unit}{mark}"
        )
    beyond = [r for r in doc["results"] if r.get("beyond_source")]
    if beyond:
        lines += ["", "extrapolates (the clock saw no steps like these; † in the table):"]
        for r in beyond:
            parts = [
                f"{b['feature']} up to {b['replay_max']:,.0f} a step (the source: {b['source_max']:,.0f}"
                + ("" if b["priced"] else "; unpriced, the clock dropped it")
                + ")"
                for b in r["beyond_source"]
            ]
            lines.append(f"           {r['label']}: {', '.join(parts)}")
    if doc["results"]:
        top = doc["results"][0]
        lines += ["", f"best       {top['label']}: {label} {_fmt(top[key], '{:,.2f}')} {unit} ({pm})"]
        close = [r["label"] for r in doc["results"][1:] if r["within_error_of_best"]]
        if close:
            lines.append(f"           within the clock's error of it: {', '.join(close)}")
        if err is None:
            lines.append(
                "           the clock's error is unknown (no model fitted): rank by steps and tokens, not by "
                "the time figures' size"
            )
    return lines
