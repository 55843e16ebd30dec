"""A replay's clock in a sentence: what prices a replayed step, and how far to trust it, as
`replay --timed` and `sweep` print it; the clock as a replay's header and `sweep --json` keep
it, its refusal worded; and why there is no clock."""

from __future__ import annotations

from typing import Any

from tracer.analysis.clock import NoClock, StepClock
from tracer.render.timing_report import refusal_sentence


def clock_sentence(clock: StepClock) -> str:
    """What prices a replayed step, and how far to trust it."""
    if clock.kind == "median":
        ms = clock.model.coef["step"]
        return (
            f"every step priced at the source's measured median step, {ms:,.3f} ms ({clock.steps} usable "
            f"steps: too few to fit a step-time model); error unknown"
        )
    warmup = ""
    if clock.warmup_ms:
        warmup = f"; the first step also pays the recorded server's warm-up, {clock.warmup_ms:,.1f} ms"
    return (
        f"step-time model fitted on the source ({clock.steps} usable steps): held-out error "
        f"{clock.heldout_median_pct:.1f}% median, {clock.heldout_p90_pct:.1f}% p90 per step, "
        f"{clock.heldout_total_pct:+.1f}% summed{warmup}"
    )


def clock_document(clock: StepClock) -> dict[str, Any]:
    """The clock as a timed replay's header (`replay.clock`) and `sweep --json` keep it: its
    fields, with a median clock's refusal in words."""
    return worded_clock(clock.to_dict())


def worded_clock(doc: dict[str, Any]) -> dict[str, Any]:
    """A clock's dict (StepClock.to_dict) with its `refused` facts in words, in its place."""
    refused = doc.get("refused")
    if not isinstance(refused, dict):
        return doc
    return {**doc, "refused": refusal_sentence(refused["what"], refused["counts"])}


def no_clock_sentence(exc: NoClock) -> str:
    """Why a trace cannot price a replay: not even one measured step, and why it did not fit."""
    why = refusal_sentence(exc.what, exc.counts)
    return f"{exc.path}: no measured step to price a replay with ({why})"


def timed_line(clock: StepClock, arrivals: str) -> str:
    """`replay --timed`'s first line: what prices each step, and when requests arrive."""
    return f"timed: {clock_sentence(clock)}; arrivals by recorded {arrivals}"
