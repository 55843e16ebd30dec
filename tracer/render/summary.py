"""Plain-text summary of a trace (`schedscope summary`): how it was recorded, the engine, the
totals, the flags and a per-step table. The shared lines (engine, flags) are tracer.render.text's.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tracer.analysis.session import Session
from tracer.render.flags import message
from tracer.render.text import describe_gaps, engine_line, flags_line, footer_mismatch
from tracer.render.why import waiting_lines
from tracer.trace.trace_type import Trace


def _budget_line(trace: Trace, i: int) -> str:
    col = trace.columns
    used, reserved = int(col["input_used"][i]), int(col["input_reserved"][i])
    return f"input {used} = {used - reserved} target + {reserved} reserved draft slots"


def summary_lines(source: Session | Trace, *, first: int = 0, limit: int | None = 40) -> Iterator[str]:
    session = Session.of(source)
    trace = session.trace
    h, col = trace.header, trace.columns
    n = len(trace)
    yield f"trace    {trace.path}"
    yield (
        f"recorded schema {h.get('schema')}, vLLM {h.get('vllm_version')}, schedscope "
        f"{h.get('schedscope_version')}, scheduler {h.get('scheduler_cls')} "
        f"(policy {h.get('policy')}, regime {h.get('regime')})"
    )
    yield f"engine   {engine_line(trace.config)}"
    foot = trace.footer
    state = (
        f"footer: {foot['steps_written']} steps written, {foot['records_dropped']} records dropped"
        if foot
        else "no footer: the recording did not shut down cleanly"
    )
    yield f"steps    {n} ({state})"
    if (mismatch := footer_mismatch(trace.footer_count())) is not None:
        yield f"differs  {mismatch}"
    if trace.torn is not None:
        yield f"torn     {trace.torn.describe()}; every complete step before it is loaded"
    if trace.gaps:
        yield f"gaps     {describe_gaps(trace)}"
    for problem in trace.problems:
        yield f"skipped  {problem}"
    if n == 0:
        return
    target = col["target_used"]
    admitted = int(col["n_new"].sum() + col["n_resumed"].sum())
    yield (
        f"target   {int(target.sum())} tokens scheduled, {target.mean():.1f}/step, "
        f"max {int(target.max())} of {int(col['target_cap'].max())}"
    )
    yield (
        f"input    {int(col['input_reserved'].sum())} draft-slot rows reserved in all; "
        f"max used {int(col['input_used'].max())} of {int(col['input_cap'].max())}"
    )
    if col["query_per_req"].max() > 0:
        yield f"query    max {int(col['query_rows'].max())} rows of {int(col['query_cap'].max())}"
    yield (
        f"requests {admitted} admitted ({int(col['n_resumed'].sum())} resumed), "
        f"{int(col['n_preempted'].sum())} preemptions, {int(col['n_finished'].sum())} finished"
    )
    busiest = int(np.argmax(target))
    yield f"busiest  step {int(col['step'][busiest])}: {_budget_line(trace, busiest)}"
    report = session.report
    yield f"flags    {flags_line(report)}" + (" (schedscope flags TRACE lists them)" if report.flags else "")
    for flag in report.flags[:1]:
        yield f"         step {flag.step}: {message(flag)}"
    yield from waiting_lines(session.waiting_summary)
    yield ""
    yield from step_table(trace, first=first, limit=limit)


def step_table(trace: Trace, *, first: int = 0, limit: int | None = 40) -> Iterator[str]:
    col, run = trace.columns, trace.runner
    end = len(trace) if limit is None else min(len(trace), first + limit)
    yield (
        f"{'step':>6} {'target':>11} {'input(+rsv)':>16} {'query':>11} {'buf tgt/drf':>13} "
        f"{'new':>4} {'res':>4} {'run':>4} {'pre':>4} {'fin':>4} {'wait':>5} {'kv%':>5}"
    )
    for i in range(first, end):
        draft = int(run["draft_rows"][i])
        tgt = int(run["target_rows"][i])
        buf = f"{tgt if tgt >= 0 else '-'}/{draft if draft >= 0 else '-'}"
        query = f"{col['query_rows'][i]}/{col['query_cap'][i]}" if col["query_per_req"][i] else "-"
        yield (
            f"{col['step'][i]:>6} {col['target_used'][i]:>5}/{col['target_cap'][i]:<5} "
            f"{col['input_used'][i]:>5}(+{col['input_reserved'][i]})/{col['input_cap'][i]:<5} "
            f"{query:>11} {buf:>13} {col['n_new'][i]:>4} {col['n_resumed'][i]:>4} "
            f"{col['n_running'][i]:>4} {col['n_preempted'][i]:>4} {col['n_finished'][i]:>4} "
            f"{col['num_waiting'][i]:>5} {100 * col['kv_usage'][i]:>5.1f}"
        )
    if end < len(trace):
        yield f"... {len(trace) - end} more steps (--first/--limit, or --limit 0 for all)"
