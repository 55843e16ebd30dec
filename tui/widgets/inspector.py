"""Text panels: the step inspector, a request's lifetime, and the engine config line.

They format what tracer returns (a step record and its typed requests,
tracer.render.step.arithmetic, the flags, a RequestLife, tracer.render.text's lines); the
sentences about budgets are tracer's own.
"""

from __future__ import annotations

from typing import Any

from textual.markup import escape
from textual.widgets import Static

from tracer.analysis.flags import glyph
from tracer.analysis.requests import RequestLife
from tracer.analysis.session import StepRequests, step_requests
from tracer.analysis.why import StepWhy
from tracer.render import empty, labels
from tracer.render.flags import message
from tracer.render.life import life_rows
from tracer.render.step import arithmetic, buffers_line, step_place, step_status
from tracer.render.text import RunLine, engine_parts
from tracer.render.why import cause_text, reason_cell
from tui.data import TraceModel
from tui.markup import bold
from tui.widgets.textview import TextView

SEVERITY_STYLE = {"error": "$error", "warning": "$warning", "info": "$text-muted"}
MAX_REQUEST_LINES = 200
# How the inspector names each record group of scheduled requests, and colours it.
ROLE = {"new": labels.ADMITTED}
ROLE_STYLE = {"new": "$success", "resumed": "$accent"}


def engine_line(model: TraceModel) -> str:
    """tracer.render.text's engine line, the spec-decode method in bold."""
    spec, *rest = (escape(p) for p in engine_parts(model.trace.config))
    return " · ".join([f"[b]{spec}[/b]", *rest])


def run_line(model: TraceModel) -> str:
    """The file, how it was recorded, and tracer.render.text's run line in parts."""
    h = model.trace.header
    run = RunLine.of(model.trace, model.report)
    parts = [
        f"[b]{escape(model.name)}[/b]",
        labels.policy_part(escape(str(h.get("policy"))), mark=bold),
        labels.regime_part(escape(str(h.get("regime")))),
        labels.vllm_part(escape(str(h.get("vllm_version")))),
        run.steps,
        escape(run.flag_total),
    ]
    if run.withheld:
        parts.append(f"[$error]{escape(run.withheld)}[/]")
    parts += [f"[$warning]{escape(p)}[/]" for p in (run.torn, run.gaps) if p]
    return " · ".join(parts)


class Inspector(TextView):
    """Everything about the step under the cursor."""

    def show(self, model: TraceModel | None, row: int) -> None:
        if model is None or not 0 <= row < len(model):
            self.update(f"[$text-muted]{empty.NO_STEP_SELECTED}[/]")
            return
        self.update("\n".join(self.lines(model, row)))

    @staticmethod
    def lines(model: TraceModel, row: int) -> list[str]:
        trace = model.trace
        rec = trace.step(row)
        col = trace.columns
        out = [
            f"{bold(labels.step_title(rec['step']))} [$text-muted]({escape(step_place(trace, row, rec))})[/]",
            f"[b $primary]{labels.BUDGET}[/]",
        ]
        for line in arithmetic(trace, row, model.report.analysis):
            style = "$error" if line.startswith("withheld") else "$text"
            out.append(f"  [{style}]{escape(line)}[/]")
        buffers = buffers_line(trace, row)
        if buffers:
            out.append(f"  {buffers}")
        out.append(f"  {escape(step_status(rec))}")
        # Flags before requests: why the step was flagged is the first thing to read.
        flags = model.flags_at(row)
        out.append(f"[b $primary]{labels.FLAGS}[/] {f'({len(flags)})' if flags else empty.NONE}")
        for f in flags:
            style = SEVERITY_STYLE.get(f.severity, "$text")
            out.append(f"  [{style}]{glyph(f.severity)} {f.kind}[/] [$text-muted]({f.severity})[/]")
            out.append(f"    {escape(message(f))}")
        why = model.step_why(row, rec)
        out.append(f"[b $primary]{labels.WHY_HEADING}[/] {escape(cause_text(why.binding))}")
        out += Inspector._requests(step_requests(rec), int(col["query_per_req"][row]), why)
        return out

    @staticmethod
    def _requests(reqs: StepRequests, q: int, why: StepWhy) -> list[str]:
        entries = reqs.scheduled
        # The reason column: what clipped each request below its demand (tracer.analysis.why);
        # shown when one was (the panel is narrow, the ids long).
        reasons = {r.id: reason_cell(r.cause) for r in why.requests}
        shown = [reasons.get(e.id, "") for e in entries[:MAX_REQUEST_LINES]]
        rw = max([len(labels.COL_REASON), *map(len, shown)]) + 2 if any(shown) else 0
        out = [
            f"[b $primary]{labels.REQUESTS_HEADING}[/] {labels.scheduled_count(len(entries))}",
            f"[$text-muted]  {'':9}{labels.COL_TOKENS:>7}{labels.COL_SPEC:>6}{labels.COL_QUERY:>7}"
            f"{labels.COL_DEMAND:>8}  {labels.COL_REASON if rw else '':<{rw}}{labels.COL_ID}[/]",
        ]
        for e, reason in zip(entries[:MAX_REQUEST_LINES], shown, strict=True):
            role = ROLE.get(e.kind, e.kind)
            style = ROLE_STYLE.get(e.kind, "$text")
            out.append(
                f"  [{style}]{role:<9}[/]{e.tokens:>7}{e.spec:>6}{(q or '–')!s:>7}"
                f"{(e.demand if e.demand >= 0 else '?')!s:>8}  [$warning]{escape(f'{reason:<{rw}}')}[/]"
                f"{escape(str(e.id))}"
            )
        if len(entries) > MAX_REQUEST_LINES:
            out.append(f"  {labels.more(len(entries) - MAX_REQUEST_LINES)}")

        def ids(values: list[Any]) -> str:
            shown = ", ".join(escape(str(v)) for v in values[:20])
            return shown + (f" … (+{len(values) - 20})" if len(values) > 20 else "")

        if reqs.preempted:
            out.append(f"  [$warning]{labels.PREEMPTED}[/] {ids(reqs.preempted)}")
        if reqs.finished:
            out.append(f"  [$text-muted]{labels.FINISHED}[/]  {ids(reqs.finished)}")
        return out + _held(reqs, why)


class LifetimePanel(Static):
    """A request's lifetime, from tracer.analysis.lookup.request_life."""

    DEFAULT_CSS = "LifetimePanel { padding: 0 1; }"

    def show_life(self, query: str, life: RequestLife | None, suggestions: list[str]) -> None:
        if life is None:
            text = empty.no_request(query, mark=lambda q: f"[b]{escape(q)}[/b]")
            if suggestions:
                text += "\n" + empty.ids_like([escape(s) for s in suggestions])
            self.update(text)
            return
        lines = [bold(labels.request_title(escape(life.id)))]
        lines += [f"  [$text-muted]{k:<12}[/]{escape(v)}" for k, v in life_rows(life)]
        lines.append(f"[$text-muted]  {empty.life_found('[b]/[/b]')}[/]")
        self.update("\n".join(lines))


def _held_rows(rows: list[tuple[str, int, str, str]], more: int = 0) -> list[str]:
    """(state, demand, reason, id) rows under a header, the reason column as wide as it needs."""
    rw = max([len(labels.COL_REASON), *(len(r[2]) for r in rows)]) + 2
    out = [f"[$text-muted]  {'':12}{labels.COL_DEMAND:>7}  {labels.COL_REASON:<{rw}}{labels.COL_ID}[/]"]
    for state, demand, reason, rid in rows[:MAX_REQUEST_LINES]:
        out.append(
            f"  [$text-muted]{state:<12}[/]{demand:>7}  [$warning]{escape(f'{reason:<{rw}}')}[/]{escape(rid)}"
        )
    left = len(rows) - MAX_REQUEST_LINES + more
    if left > 0:
        out.append(f"  {labels.more(left, unlisted=bool(more))}")
    return out


def _held(reqs: StepRequests, why: StepWhy) -> list[str]:
    """The running requests given no tokens, and the waiting ones, each with its reason."""
    by_id = {r.id: r for r in why.requests}
    out: list[str] = []
    if reqs.unscheduled:
        rows = [
            (labels.UNSCHEDULED, d.demand, reason_cell(by_id[d.id].cause) if d.id in by_id else "", str(d.id))
            for d in reqs.unscheduled
        ]
        out.append(f"[b $primary]{labels.RUNNING_NOT_SCHEDULED}[/] ({len(rows)})")
        out += _held_rows(rows)
    if reqs.waiting:
        rows = [
            (labels.WAITING, d.demand, reason_cell(by_id[d.id].cause) if d.id in by_id else "", str(d.id))
            for d in reqs.waiting
        ]
        more = reqs.waiting_truncated
        out.append(f"[b $primary]{labels.WAITING_NOT_ADMITTED}[/] ({len(rows) + more})")
        out += _held_rows(rows, more)
    return out
