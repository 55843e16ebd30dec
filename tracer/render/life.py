"""A request's lifetime (tracer.analysis.requests.RequestLife) in rows, as the TUI's request
search shows it: each event's label and its steps in words."""

from __future__ import annotations

from tracer.analysis.requests import RequestLife


def ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1–3, 7, 9–10'."""
    if not steps:
        return "–"
    parts: list[str] = []
    start = prev = steps[0]
    for s in [*steps[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(f"{start}" if start == prev else f"{start}–{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(parts)


def life_rows(life: RequestLife) -> list[tuple[str, str]]:
    """(label, value) for each of the request's events, in the order they are read."""
    prefill = (
        f"step {life.prefill_done} ({life.prefill_steps} steps)" if life.prefill_done is not None else "–"
    )
    return [
        ("admitted", f"step {life.admitted}" if life.admitted is not None else "– (before the trace)"),
        ("scheduled", f"{len(life.scheduled)} steps: {ranges(life.scheduled)}"),
        ("first token", prefill),
        ("preempted", ranges(life.preempted)),
        ("resumed", ranges(life.resumed)),
        ("finished", f"step {life.finished}" if life.finished is not None else "– (not in the trace)"),
        ("tokens", f"{life.tokens} scheduled in all"),
    ]
