"""Text panels: the step inspector, a request's lifetime, and the engine config line.

They format what tracer returns (a step record, tracer.analysis.budget.arithmetic, the
flags, a RequestLife); the sentences about budgets are tracer's own.
"""

from __future__ import annotations

from typing import Any

from textual.markup import escape
from textual.widgets import Static

from tracer.analysis.budget import arithmetic
from tracer.analysis.compare import RequestLife
from tracer.render.summary import describe_gaps
from tui.data import TraceModel
from tui.widgets.textview import TextView

GLYPH = {"error": "✖", "warning": "▲", "info": "●"}
SEVERITY_STYLE = {"error": "$error", "warning": "$warning", "info": "$text-muted"}
MAX_REQUEST_LINES = 200


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


def engine_line(model: TraceModel) -> str:
    """The header's config, short enough for one line."""
    c = model.trace.config
    method = c.get("spec_method")
    spec = f"[b]{escape(str(method))}[/b] K={c.get('num_speculative_tokens')}" if method else "no spec decode"
    q = c.get("query_rows_per_req") or 0
    cap, seqs = c.get("max_num_active_seqs"), c.get("max_num_seqs")
    parts = [
        spec,
        f"draft slots {c.get('draft_slots')}",
        f"query rows/req {q}" if q else "",
        f"B {c.get('max_num_batched_tokens')}",
        f"target cap {c.get('max_num_scheduled_tokens')}",
        f"max seqs {seqs}" + (f" (active cap {cap})" if cap and cap != seqs else ""),
        str(c.get("scheduling_policy")),
        "async" if c.get("async_scheduling") else "sync",
    ]
    return " · ".join(p for p in parts if p)


def run_line(model: TraceModel) -> str:
    h = model.trace.header
    report = model.report
    lost = f" · [$error]{report.tokens_lost} tokens withheld[/]" if report.tokens_lost else ""
    flags = f"{len(report.flags)} flags" if report.flags else "no flags"
    gaps = describe_gaps(model.trace)
    gaps = f" · [$warning]{escape(gaps)}[/]" if gaps else ""
    return (
        f"[b]{escape(model.name)}[/b] · policy [b]{escape(str(h.get('policy')))}[/b] · "
        f"regime {escape(str(h.get('regime')))} · vLLM {escape(str(h.get('vllm_version')))} · "
        f"{len(model)} steps · {flags}{lost}{gaps}"
    )


class Inspector(TextView):
    """Everything about the step under the cursor."""

    def show(self, model: TraceModel | None, row: int) -> None:
        if model is None or not 0 <= row < len(model):
            self.update("[$text-muted]no step selected[/]")
            return
        self.update("\n".join(self.lines(model, row)))

    @staticmethod
    def lines(model: TraceModel, row: int) -> list[str]:
        trace = model.trace
        rec = trace.step(row)
        col = trace.columns
        t0 = trace.header.get("t0")
        when = f" · t +{rec['t'] - t0:.3f} s" if isinstance(t0, (int, float)) else ""
        out = [
            f"[b]Step {rec['step']}[/b] [$text-muted](row {row + 1} of {len(trace)}{when} · "
            f"schedule() {rec.get('sched_us', 0):.0f} µs)[/]",
            "[b $primary]Budget[/]",
        ]
        for line in arithmetic(trace, row, model.report.analysis):
            style = "$error" if line.startswith("withheld") else "$text"
            out.append(f"  [{style}]{escape(line)}[/]")
        run = trace.runner
        passes = []
        for name, rows, cap in (
            ("target", "target_rows", "target_cap"),
            ("draft", "draft_rows", "draft_cap"),
        ):
            if run[rows][row] >= 0:
                passes.append(f"{name} pass {int(run[rows][row])}/{int(run[cap][row])} rows")
        if passes:
            out.append(f"  buffers: {' · '.join(passes)}")
        out.append(
            f"  after the step: {rec['num_running']} running · {rec['num_waiting']} waiting · "
            f"KV {100 * float(rec['kv_usage']):.1f}%"
        )
        # Flags before requests: why the step was flagged is the first thing to read.
        flags = model.flags_at(row)
        out.append(f"[b $primary]Flags[/] ({len(flags)})" if flags else "[b $primary]Flags[/] none")
        for f in flags:
            style = SEVERITY_STYLE.get(f.severity, "$text")
            out.append(f"  [{style}]{GLYPH.get(f.severity, '?')} {f.kind}[/] [$text-muted]({f.severity})[/]")
            out.append(f"    {escape(f.message)}")
        out += Inspector._requests(rec, int(col["query_per_req"][row]))
        return out

    @staticmethod
    def _requests(rec: dict[str, Any], q: int) -> list[str]:
        entries = [("admitted", e) for e in rec["new"]]
        entries += [("resumed", e) for e in rec["resumed"]]
        entries += [("running", e) for e in rec["running"]]
        out = [
            f"[b $primary]Requests[/] ({len(entries)} scheduled)",
            f"[$text-muted]  {'':9}{'tokens':>7}{'spec':>6}{'query':>7}{'demand':>8}  id[/]",
        ]
        for role, e in entries[:MAX_REQUEST_LINES]:
            rid, tokens = e[0], e[1]
            spec = e[2] if len(e) > 2 else 0
            demand = e[3] if len(e) > 3 else -1
            style = "$success" if role == "admitted" else ("$accent" if role == "resumed" else "$text")
            out.append(
                f"  [{style}]{role:<9}[/]{tokens:>7}{spec:>6}{(q or '–')!s:>7}"
                f"{(demand if demand >= 0 else '?')!s:>8}  {escape(str(rid))}"
            )
        if len(entries) > MAX_REQUEST_LINES:
            out.append(f"  … {len(entries) - MAX_REQUEST_LINES} more")

        def ids(values: list[Any]) -> str:
            shown = ", ".join(escape(str(v)) for v in values[:20])
            return shown + (f" … (+{len(values) - 20})" if len(values) > 20 else "")

        if rec["preempted"]:
            out.append(f"  [$warning]preempted[/] {ids(rec['preempted'])}")
        if rec["finished"]:
            out.append(f"  [$text-muted]finished[/]  {ids(rec['finished'])}")
        if rec.get("unscheduled"):
            items = [f"{e[0]} ({e[1]})" for e in rec["unscheduled"]]
            out.append(f"  [$text-muted]running, not scheduled (demand)[/] {ids(items)}")
        if rec.get("waiting_demand"):
            items = [f"{e[0]} ({e[1]})" for e in rec["waiting_demand"]]
            more = rec.get("waiting_demand_truncated") or 0
            out.append(
                f"  [$text-muted]waiting, not admitted (demand)[/] {ids(items)}"
                + (f" +{more}" if more else "")
            )
        return out


class LifetimePanel(Static):
    """A request's lifetime, from tracer.analysis.lookup.request_life."""

    DEFAULT_CSS = "LifetimePanel { padding: 0 1; }"

    def show_life(self, query: str, life: RequestLife | None, suggestions: list[str]) -> None:
        if life is None:
            text = f"No request [b]{escape(query)}[/b] in this trace."
            if suggestions:
                text += "\nIds starting with it: " + ", ".join(escape(s) for s in suggestions)
            self.update(text)
            return
        prefill = (
            f"step {life.prefill_done} ({life.prefill_steps} steps)" if life.prefill_done is not None else "–"
        )
        rows = [
            ("admitted", f"step {life.admitted}" if life.admitted is not None else "– (before the trace)"),
            ("scheduled", f"{len(life.scheduled)} steps: {ranges(life.scheduled)}"),
            ("first token", prefill),
            ("preempted", ranges(life.preempted)),
            ("resumed", ranges(life.resumed)),
            ("finished", f"step {life.finished}" if life.finished is not None else "– (not in the trace)"),
            ("tokens", f"{life.tokens} scheduled in all"),
        ]
        lines = [f"[b]Request {escape(life.id)}[/b]"]
        lines += [f"  [$text-muted]{k:<12}[/]{escape(v)}" for k, v in rows]
        lines.append("[$text-muted]  the cursor moved to its admission; [b]/[/b] searches again[/]")
        self.update("\n".join(lines))
