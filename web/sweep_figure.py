"""The `schedscope sweep` figure: one line per policy (and per other swept knob), the
objective against the budget, with the clock's summed error as error bars.
Built from tracer.whatif.sweep's JSON document, so the CLI, the web app and a notebook
draw the same figure."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import plotly.graph_objects as go
from dash import dcc, html

from tracer.render import labels
from tracer.render.sweep_report import figure_title, objective_axis, sweep_lines
from tracer.whatif.sweep import OBJECTIVES


def sweep_figure(doc: dict[str, Any]) -> go.Figure:
    key, label, unit, _ = OBJECTIVES[doc["objective"]]
    err = doc.get("error_pct")
    lines: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in doc["results"]:
        s = r["setting"]
        rest = [
            f"{k}={v}"
            for k, v in s.items()
            if k not in ("policy", "max_num_batched_tokens") and v is not None
        ]
        lines[" ".join([s["policy"], *rest])].append(r)
    fig = go.Figure()
    for name, rows in lines.items():
        rows = sorted(rows, key=lambda r: r["setting"]["max_num_batched_tokens"] or 0)
        xs = [r["setting"]["max_num_batched_tokens"] for r in rows]
        ys = [r[key] for r in rows]
        error = None if err is None else {"type": "data", "array": [abs(y or 0) * err / 100 for y in ys]}
        fig.add_trace(
            go.Scatter(
                x=[x if x is not None else labels.SWEEP_RECORDED for x in xs],
                y=ys,
                name=name,
                mode="lines+markers",
                error_y=error,
                customdata=[
                    [r["steps"], r["target_tokens_per_step"], r["tokens_withheld"], r["rank"]] for r in rows
                ],
                hovertemplate=labels.sweep_hover(name, label, unit),
            )
        )
    fig.update_layout(
        title=figure_title(doc),
        xaxis_title=labels.SWEEP_X_AXIS,
        yaxis_title=objective_axis(doc),
        template="plotly_white",
        legend_title=labels.SWEEP_LEGEND,
        height=520,
    )
    return fig


def sweep_tab(doc: dict[str, Any]) -> dcc.Tab:
    """The web app's Sweep page: a saved `schedscope sweep --json`, as the figure and the
    ranked table the terminal prints (tracer.whatif.sweep's sentences)."""
    return dcc.Tab(
        label=labels.SWEEP_TAB,
        value="sweep",
        id="sweep-tab",
        children=[
            dcc.Graph(id="sweep-graph", figure=sweep_figure(doc), config={"displaylogo": False}),
            html.Pre("\n".join(sweep_lines(doc)), id="sweep-table", style={"fontSize": "12px"}),
        ],
    )


def write_sweep_plot(doc: dict[str, Any], *, html: str | None = None, png: str | None = None) -> list[str]:
    """`schedscope sweep --plot/--png`: the figure as a standalone HTML page and/or a PNG."""
    fig = sweep_figure(doc)
    written = []
    if html:
        fig.write_html(html, include_plotlyjs=True)
        written.append(html)
    if png:
        from web.export import figure_png

        with open(png, "wb") as fh:
            fh.write(figure_png(fig, width=1000))
        written.append(png)
    return written
