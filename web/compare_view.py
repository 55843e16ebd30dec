"""The compare page: two traces aligned as tracer.analysis.compare aligns them (step k of A
against step k of B), overlaid, with per-step deltas, totals and the `diff` headline."""

from __future__ import annotations

from typing import Any

import numpy as np
from dash import html

from tracer.analysis.compare import Comparison, Side
from tracer.render import labels
from tracer.render.compare import headline_sentences, performance_note, performance_rows
from tracer.render.text import compare_totals
from web.chart import Chart, Line, Markers, Panel
from web.timeline import flag_hover

A_COLOR, B_COLOR, DELTA_COLOR, DARK = "#7f7f7f", "#1f77b4", "#2ca02c", "#444444"


def _flag_markers(c: Comparison, side: Side, label: str, color: str, symbol: str) -> Markers:
    flags = side.flags.flags
    # Aligned by row: the i-th step of each trace sits at x = i + 1.
    rows = np.searchsorted(side.trace.columns["step"], flags.steps)
    return Markers(
        name=labels.flags_in(label, len(flags)),
        panel=0,
        rows=rows,
        y=[int(c.values["target_used"][0 if label == "A" else 1][r]) for r in rows.tolist()],
        color=color,
        text=lambda i: f"<b>{label}</b> " + flag_hover(flags[i]),
        symbol=symbol,
    )


def compare_chart(c: Comparison) -> Chart:
    a_name, b_name = labels.side_name("A", c.a.name), labels.side_name("B", c.b.name)

    def overlay(title: str, column: str) -> Panel:
        va, vb = c.values[column]
        return Panel(
            title,
            (
                Line(a_name, va, A_COLOR, width=2.5),
                Line(b_name, vb, B_COLOR, dash="dot", width=2),
            ),
        )

    def delta(title: str, column: str) -> Panel:
        # No fill under the signed line (the WebGL lines used before drew stray polygons for one).
        return Panel(title, (Line(labels.DIFFERENCE, c.delta(column), DELTA_COLOR, width=2),), weight=0.7)

    panels = (
        overlay(labels.COMPARE_TARGET, "target_used"),
        delta(labels.COMPARE_TARGET_DELTA, "target_used"),
        overlay(labels.COMPARE_QUERY, "query_rows"),
        delta(labels.COMPARE_QUERY_DELTA, "query_rows"),
        overlay(labels.COMPARE_ADMITTED, "admitted"),
        overlay(labels.COMPARE_PREEMPTED, "preempted"),
        delta(labels.COMPARE_ADMITTED_DELTA, "admitted"),
    )
    markers = (
        _flag_markers(c, c.a, "A", "#d62728", "diamond"),
        _flag_markers(c, c.b, "B", "#9467bd", "diamond-open"),
    )
    return Chart(x=c.steps, panels=panels, markers=markers, height=1050)


def headline(c: Comparison) -> list[str]:
    """The headline sentences, exactly as `schedscope diff` prints them."""
    return headline_sentences(c)


def totals_table(c: Comparison) -> html.Table:
    head = html.Tr([html.Th(""), html.Th("A"), html.Th("B"), html.Th(labels.DIFFERENCE)])
    rows = []
    for total in compare_totals(c):
        a, b, d = total.cells()
        # The colour comes from the total's direction (tracer.render.text), never from its label.
        label = html.Td(total.label, title=total.direction or None)
        rows.append(html.Tr([label, html.Td(a), html.Td(b), html.Td(d, className=total.verdict)]))
    return html.Table([html.Thead(head), html.Tbody(rows)], id="compare-totals-table", className="totals")


def performance_block(c: Comparison) -> list[Any]:
    """Throughput and latency of both sides (tracer.render.compare's rows and note), beside the totals."""
    if c.perf is None:
        return []
    rows = performance_rows(*c.perf)
    head = html.Tr([html.Th(""), html.Th("A"), html.Th("B")])
    body = [html.Tr([html.Td(label), html.Td(a), html.Td(b)]) for label, a, b in rows]
    table = html.Table([html.Thead(head), html.Tbody(body)], id="compare-perf-table", className="totals")
    return [html.P(performance_note(*c.perf), id="compare-perf-note"), table]


def totals_children(c: Comparison) -> list[Any]:
    return [totals_table(c), *performance_block(c)]
