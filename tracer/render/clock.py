"""A replay's clock in a sentence: what prices a replayed step, and how far to trust it, as
`replay --timed` and `sweep` print it."""

from __future__ import annotations

from tracer.analysis.clock import StepClock


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
