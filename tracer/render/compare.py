"""The sentences of a comparison (tracer.analysis.compare): the headline, the report
`schedscope diff` prints, and each side's throughput and latency side by side, which the
TUI's and the web app's compare views show too.
"""

from __future__ import annotations

import numpy as np

from tracer.analysis.clock import Performance
from tracer.analysis.compare import DELTA_COLUMNS, Comparison
from tracer.analysis.flags import ADDITIVE
from tracer.render.fidelity import identity_line
from tracer.render.text import TTFT_FROM_SENTENCE, TTFT_FROM_SHORT, totals_lines
from tracer.trace.schema import OFFLINE_MODEL_NAME


def headline(c: Comparison) -> str:
    """The headline as one paragraph."""
    return " ".join(headline_sentences(c))


def headline_sentences(c: Comparison) -> list[str]:
    a, b = c.a, c.b
    da, db = a.steps_to_drain, b.steps_to_drain
    verb = "the same" if da == db else ("fewer" if db < da else "more")
    out = [
        f"B ({b.name}) drained the workload in {db} steps instead of {da} (A, {a.name}): {verb}"
        + ("." if da == db else f" by {abs(da - db)}.")
    ]
    # The request whose prefill length changed most says what the budget did.
    best = c.prefill_change()
    if best is not None:
        rid, pa, pb = best
        out.append(f"Request {rid!r} finished its prefill in {pb} steps instead of {pa}.")
    for side, label in ((a, "A"), (b, "B")):
        withheld = side.flags.tokens_withheld
        if not withheld:
            continue
        per_step = side.flags.flags.withheld()[side.flags.flags.positions([ADDITIVE])].tolist()
        if len(set(per_step)) == 1:
            spread = f"{per_step[0]} target tokens in each of {len(per_step)} steps"
        else:
            spread = f"{withheld} target tokens over {len(per_step)} steps"
        out.append(f"In {label} the additive draft-slot reservation withheld {spread} ({withheld} in all).")
        if label == "A" and c.perf is not None:
            offline = a.trace.config.get("model") == OFFLINE_MODEL_NAME
            cost = withheld_cost_sentence(*c.perf, withheld, offline)
            if cost is not None:
                out.append(cost)
    fa, fb = len(a.flags.flags), len(b.flags.flags)
    if fa != fb:
        out.append(f"Flags: {fa} in A, {fb} in B.")
    return out


def diff_lines(c: Comparison, *, rows: int = 20) -> list[str]:
    """The text report of `schedscope diff`."""
    a, b = c.a, c.b
    lines = [
        f"A  {a.trace.path}  policy {a.name}, vLLM {a.trace.header.get('vllm_version')}",
        f"B  {b.trace.path}  policy {b.name}, vLLM {b.trace.header.get('vllm_version')}",
        "",
        *headline_sentences(c),
    ]
    # A what-if trace keeps its baseline's identity check: say how much of this diff
    # could be replay error rather than the policy.
    for side in (b, a):
        line = identity_line(side.trace.header)
        if line is not None:
            lines.append(f"{line}.")
            break
    lines += ["", *totals_lines(c)]
    if c.perf is not None:
        lines += ["", performance_note(*c.perf)]
        figures = performance_rows(*c.perf)
        # At least the totals' 12 columns; wider when a figure is (a long run's drain in ms).
        w = max(12, *(len(v) + 2 for _, va, vb in figures for v in (va, vb)))
        for label, va, vb in figures:
            lines.append(f"{label:24}{va:>{w}}{vb:>{w}}")
    changed = np.flatnonzero(np.any([c.delta(n) != 0 for n in DELTA_COLUMNS], axis=0))
    lines += ["", f"{len(changed)} steps differ" + (":" if len(changed) else ".")]
    if len(changed):
        heads = (("step", 6), ("target A", 10), ("target B", 10), ("Δ", 7), ("query Δ", 9), ("admit Δ", 9))
        lines.append("".join(f"{h:>{w}}" for h, w in heads) + f"{'preempt Δ':>11}")
        for i in changed[:rows]:
            ta, tb = c.values["target_used"][0][i], c.values["target_used"][1][i]
            lines.append(
                f"{int(c.steps[i]):>6}{int(ta):>10}{int(tb):>10}{int(tb - ta):>+7}"
                f"{int(c.delta('query_rows')[i]):>+9}{int(c.delta('admitted')[i]):>+9}"
                f"{int(c.delta('preempted')[i]):>+11}"
            )
        if len(changed) > rows:
            lines.append(f"... {len(changed) - rows} more (--rows)")
    return lines


# -- each side's throughput and latency ----------------------------------------------------
# Short enough for a table column; performance_note says what each means.
BASIS_SHORT = {"measured": "measured", "predicted": "predicted", "priced": "priced", "unpriced": "sched only"}
BASIS_SENTENCE = {
    "measured": "measured from its own timestamps",
    "predicted": "predicted (a timed replay: its timestamps are the clock's)",
    "priced": "predicted (an untimed replay, priced here with the recording's clock)",
    "unpriced": "the offline scheduler's own CPU time (an untimed replay, and no recording to price it with)",
}


def _fmt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def performance_rows(a: Performance, b: Performance) -> list[tuple[str, str, str]]:
    """(label, A, B) per figure: what diff and both compare views show side by side."""

    def pct(p: dict[str, float] | None, key: str) -> float | None:
        return None if p is None else p.get(key)

    return [
        ("times", BASIS_SHORT[a.basis], BASIS_SHORT[b.basis]),
        ("prompt tok/s", _fmt(a.prompt_tok_s, "{:,.0f}"), _fmt(b.prompt_tok_s, "{:,.0f}")),
        ("output tok/s", _fmt(a.output_tok_s, "{:,.0f}"), _fmt(b.output_tok_s, "{:,.0f}")),
        ("TTFT from", TTFT_FROM_SHORT[a.ttft_from], TTFT_FROM_SHORT[b.ttft_from]),
        ("TTFT p50 ms", _fmt(pct(a.ttft_ms, "p50"), "{:,.2f}"), _fmt(pct(b.ttft_ms, "p50"), "{:,.2f}")),
        ("TTFT p99 ms", _fmt(pct(a.ttft_ms, "p99"), "{:,.2f}"), _fmt(pct(b.ttft_ms, "p99"), "{:,.2f}")),
        ("TPOT p50 ms", _fmt(pct(a.tpot_ms, "p50"), "{:,.3f}"), _fmt(pct(b.tpot_ms, "p50"), "{:,.3f}")),
        ("TPOT p99 ms", _fmt(pct(a.tpot_ms, "p99"), "{:,.3f}"), _fmt(pct(b.tpot_ms, "p99"), "{:,.3f}")),
        ("time to drain ms", f"{a.drain_s * 1e3:,.2f}", f"{b.drain_s * 1e3:,.2f}"),
        ("error (summed)", _err(a), _err(b)),
    ]


def performance_note(a: Performance, b: Performance) -> str:
    """Where each side's times come from, and their error."""

    def side(label: str, p: Performance) -> str:
        err = "" if p.basis in ("measured", "unpriced") else f", {_err(p)} summed"
        return f"{label} {BASIS_SENTENCE[p.basis]}{err}"

    return f"Times: {side('A', a)}; {side('B', b)}. {TTFT_FROM_SENTENCE[a.ttft_from]}."


def _err(p: Performance) -> str:
    if p.basis == "measured":
        return "-"
    return "unknown" if p.error_pct is None else f"±{p.error_pct:.1f}%"


def withheld_cost_sentence(a: Performance, b: Performance, withheld: int, offline: bool) -> str | None:
    """What A's withheld target tokens cost in time, when B (without them) drained sooner.

    Priced as A's measured median prefill step per extra step: the steps the
    withheld tokens added are prefill steps, and that price needs no model (a
    7-step trace cannot fit one)."""
    extra = a.steps - b.steps
    if withheld <= 0 or extra <= 0 or a.median_prefill_ms is None:
        return None
    ms = extra * a.median_prefill_ms
    share = 100.0 * ms / (a.prefill_s * 1e3) if a.prefill_s > 0 else None
    steps = "one extra step" if extra == 1 else f"{extra} extra steps"
    of = f", {share:.0f}% of A's prefill time ({a.prefill_s * 1e3:,.2f} ms)" if share is not None else ""
    where = " (recorded offline: the scheduler's own time, no model ran)" if offline else ""
    return (
        f"The {withheld} withheld tokens cost {steps}, ≈ {ms:,.2f} ms{of}, priced at A's measured "
        f"median prefill step ({a.median_prefill_ms:,.3f} ms){where}."
    )
