"""The step inspector: one step's requests and tokens, its budget arithmetic, its flags.

The arithmetic lines are tracer.render.step.arithmetic's, and the heading's place and the
status line tracer.render.step's, verbatim, as the TUI's inspector prints them; the requests
are the step record's, typed by tracer.analysis.session.step_requests.
"""

from __future__ import annotations

from typing import Any

from dash import html

from tracer.analysis.session import StepRequests, step_requests
from tracer.render import empty, labels
from tracer.render.flags import message
from tracer.render.step import arithmetic, step_place, step_status
from web.model import TraceView

SEVERITY_CLASS = {"error": "sev-error", "warning": "sev-warning", "info": "sev-info"}


def _requests_table(reqs: StepRequests) -> html.Table:
    head = html.Tr([html.Th(h) for h in labels.REQUEST_COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td(e.kind),
                html.Td(str(e.id)),
                html.Td(e.tokens),
                html.Td(e.spec),
                html.Td(e.demand if e.demand >= 0 else "?"),
                html.Td(reqs.sampled.get(e.id, "")),
            ]
        )
        for e in reqs.scheduled
    ]
    for d in reqs.unscheduled:
        rows.append(
            html.Tr(
                [
                    html.Td(labels.NOT_SCHEDULED),
                    html.Td(str(d.id)),
                    html.Td(0),
                    html.Td(""),
                    html.Td(d.demand),
                    html.Td(""),
                ]
            )
        )
    if not rows:
        rows.append(html.Tr([html.Td(empty.NO_REQUEST_SCHEDULED, colSpan=6)]))
    return html.Table([html.Thead(head), html.Tbody(rows)], className="requests")


def _id_list(label: str, ids: list[Any], extra: int = 0) -> html.Div | None:
    if not ids:
        return None
    more = labels.and_more(extra) if extra else ""
    return html.Div([html.B(f"{label}: "), ", ".join(str(i) for i in ids) + more])


def inspector(view: TraceView | None, step: int | None) -> list[Any]:
    """Children of the inspector panel for a recorded step number."""
    if view is None or step is None:
        return [html.P(empty.INSPECT_HINT)]
    row = view.row_of(step)
    if row is None:
        return [html.P(empty.no_such_step(step))]
    rec = view.trace.step(row)
    reqs = step_requests(rec)
    flags = view.session.flags_at(row)
    lines = arithmetic(view.trace, row, view.session.analysis)
    waiting = [f"{d.id} ({d.demand})" for d in reqs.waiting]
    parts: list[Any] = [
        html.H4(labels.step_title(step), id="inspector-title"),
        html.Div(step_place(view.trace, row, rec), className="muted", id="inspector-place"),
        html.Div(step_status(rec), className="muted", id="inspector-status"),
        html.H5(labels.BUDGET_ARITHMETIC),
        html.Pre("\n".join(lines), id="inspector-arithmetic"),
        html.H5(labels.flags_count(len(flags))),
        html.Ul(
            [
                html.Li(
                    [
                        html.B(f"{f.kind} ({f.severity}): "),
                        message(f),
                        html.Br(),
                        html.Code(_numbers(f.numbers)),
                    ],
                    className=SEVERITY_CLASS.get(f.severity, ""),
                )
                for f in flags
            ]
            or [html.Li(empty.NONE)],
            id="inspector-flags",
        ),
        html.H5(labels.REQUESTS_AND_TOKENS),
        _requests_table(reqs),
    ]
    parts += [
        p
        for p in (
            _id_list(labels.PREEMPTED, reqs.preempted),
            _id_list(labels.FINISHED, reqs.finished),
            _id_list(labels.WAITING_DEMAND, waiting, reqs.waiting_truncated),
        )
        if p is not None
    ]
    return parts


def _numbers(numbers: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in numbers.items())
