"""The engines page: one lane per engine of a data-parallel run (web.model.RunView), on a shared
step axis: target tokens against the target budget, and the tokens withheld. A click on a lane
opens that engine on the timeline page."""

from __future__ import annotations

from dash import html

from tracer.render import labels
from web.chart import Chart, Line, Panel
from web.model import RunView
from web.timeline import BLUE, DARK, RED

LANE_HEIGHT = 230  # px per engine


def engines_chart(run: RunView) -> Chart:
    cached = run.cache.get("chart")
    if cached is not None:
        return cached
    panels = []
    for i, view in enumerate(run.views):
        s = view.series
        # -1 where this engine recorded no such step: a gap in its line (gaps_below=0).
        used, cap = run.on_axis(i, s["target_used"], -1), run.on_axis(i, s["target_cap"], -1)
        panels.append(
            Panel(
                labels.engine_panel(view.label),
                (
                    Line(view.label, used, BLUE, fill=True, gaps_below=0),
                    Line(labels.TARGET_BUDGET, cap, DARK, dash="dash", width=1, gaps_below=0),
                    Line(
                        labels.TOKENS_WITHHELD,
                        run.on_axis(i, s["withheld"], 0),
                        RED,
                        markers_only=True,
                        gaps_below=1,
                    ),
                ),
            )
        )
    chart = Chart(x=run.steps, panels=tuple(panels), height=80 + LANE_HEIGHT * max(1, len(panels)))
    run.cache["chart"] = chart
    return chart


def engine_of_trace(run: RunView, curve: int) -> int | None:
    """The engine whose lane holds figure trace `curve` (what a click names)."""
    chart = engines_chart(run)
    traces = chart.traces()
    return traces[curve][0] if 0 <= curve < len(traces) else None


def totals_children(run: RunView) -> list[html.Span | html.B]:
    return [html.B(labels.RUN), html.Span(run.totals_line(), id="engines-totals-line")]
