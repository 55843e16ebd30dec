"""One step's sentences, as both inspectors and the compare view print them: its status once
schedule() returned, and its budget arithmetic written out."""

from __future__ import annotations

from typing import Any

from tracer.analysis.budget import BudgetAnalysis
from tracer.trace.trace_type import Trace


def step_status(rec: dict[str, Any]) -> str:
    """A step's state once schedule() returned: the one status line both inspectors print,
    as it is, on a line of its own."""
    return (
        f"after the step: {rec['num_running']} running · {rec['num_waiting']} waiting · "
        f"KV {100 * float(rec['kv_usage']):.1f}%"
    )


def schedule_time(rec: dict[str, Any]) -> str:
    """How long the step's schedule() call took, for a step's heading."""
    return f"schedule() {rec.get('sched_us', 0):.0f} µs"


def step_place(trace: Trace, row: int, rec: dict[str, Any]) -> str:
    """Where step row `row` is in the run and what its schedule() cost, beside the step's
    number in both inspectors' headings."""
    t0 = trace.header.get("t0")
    when = f" · t +{rec['t'] - t0:.3f} s" if isinstance(t0, (int, float)) else ""
    return f"row {row + 1} of {len(trace)}{when} · {schedule_time(rec)}"


def buffers_line(trace: Trace, i: int) -> str | None:
    """The rows the model runner's passes used of their buffers at step row i (None: no
    runner record)."""
    run = trace.runner
    passes = [
        f"{name} pass {int(run[rows][i])}/{int(run[cap][i])} rows"
        for name, rows, cap in (("target", "target_rows", "target_cap"), ("draft", "draft_rows", "draft_cap"))
        if run[rows][i] >= 0
    ]
    return f"buffers: {' · '.join(passes)}" if passes else None


def arithmetic(trace: Trace, i: int, analysis: BudgetAnalysis | None = None) -> list[str]:
    """The budget arithmetic of step row i written out, one line per budget."""
    col = trace.columns
    n = int(col["n_new"][i] + col["n_resumed"][i] + col["n_running"][i])
    used, reserved = int(col["input_used"][i]), int(col["input_reserved"][i])
    slots = (reserved // n) if n else 0
    lines = [
        f"target {int(col['target_used'][i])} of {int(col['target_cap'][i])} "
        f"({int(col['target_left'][i])} left)",
        f"input {used} = {used - reserved} target + {n}×{slots} reserved draft slots "
        f"(of {int(col['input_cap'][i])}, {int(col['input_left'][i])} left)",
    ]
    if col["query_per_req"][i]:
        q = int(col["query_per_req"][i])
        lines.append(f"query {n}×{q} = {int(col['query_rows'][i])} rows of {int(col['query_cap'][i])}")
    if analysis is not None and analysis.withheld[i]:
        kind = "exactly" if analysis.exact[i] else "at most"
        lines.append(f"withheld {kind} {int(analysis.withheld[i])} target tokens by the excess reservation")
    return lines
