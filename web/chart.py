"""Stacked step charts: a pure description (Chart) and the figures and patches built from it.

A Chart is rows of panels sharing the step axis; each panel's lines are SVG
traces fed from NumPy arrays, decimated together (web.decimate) to at most
max_points each; markers (flags) are SVG points that can be hovered and clicked.
SVG, not WebGL: at that size a path draws faster than WebGL sets up, and it needs
no GPU (headless chromium with software GL drew the first figure of a 2,000-step
trace in 2.2 s instead of 5.0 s, and a zoom in 0.3–0.4 s instead of 1.9–2.8 s;
docs/performance-history.md). Trace indices are fixed by the Chart (panel lines in order,
then markers), which is what lets a Patch replace or extend one trace's arrays
without resending the figure.

Arrays reach the browser as JSON lists, not base64 typed arrays: Patch.extend
(the live view) needs lists, and at ≤4k points per trace lists are no larger.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
from dash import Patch

from tracer.render import labels
from web.decimate import MAX_POINTS, row_range, select_rows, step_points, thin

XRange = tuple[float, float] | None
MARKERS_MODE_BELOW = 200  # draw point markers on lines when this few points are visible
# Flag markers per kind in a range: one per about ten pixel columns of a 1,200-pixel timeline,
# where the 12-pixel markers still overlap into a solid band (zoom in to reach each flag). Each
# marker is an SVG node that plotly restyles on every redraw, and a zoom redraws twice (the
# relayout, the answer): at 1,000 a kind, 198k flags of one kind took about a fifth of the
# browser's time per zoom (docs/performance-history.md).
MAX_MARKERS = 120


@dataclass(frozen=True)
class Line:
    name: str
    y: np.ndarray
    color: str
    # Bands are drawn as opaque "tozeroy" fills, the upper series first and the lower over it
    # (as when the lines were WebGL, which does not render "tonexty" fills reliably).
    fill: bool = False
    dash: str | None = None
    gaps_below: float | None = None  # values below this are "no data" (a gap in the line)
    width: float = 1.5
    markers_only: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    lines: tuple[Line, ...] = ()
    yaxis: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0  # relative row height
    note: str | None = None  # shown inside the panel (e.g. "no runner records")


@dataclass(frozen=True)
class Markers:
    name: str
    panel: int
    rows: np.ndarray  # row (index into Chart.x) of each marker, ascending
    y: Sequence[Any]
    color: str
    text: Callable[[int], str]  # hover text of marker i
    symbol: str = "diamond"


@dataclass(frozen=True)
class Chart:
    x: np.ndarray  # step numbers, ascending
    panels: tuple[Panel, ...]
    markers: tuple[Markers, ...] = ()
    height: int = 1100

    def traces(self) -> list[tuple[int, Line | Markers]]:
        """(panel index, line or markers) in figure trace order."""
        out: list[tuple[int, Line | Markers]] = [
            (p, line) for p, panel in enumerate(self.panels) for line in panel.lines
        ]
        out += [(m.panel, m) for m in self.markers]
        return out


def _values(line: Line, rows: np.ndarray) -> list[Any]:
    y = line.y[rows]
    if line.gaps_below is None:
        return y.tolist()
    return [None if v < line.gaps_below else v for v in y.tolist()]


def _marker_rows(m: Markers, lo: int, hi: int, max_points: int) -> np.ndarray:
    """Indices (into m.rows) of the markers within rows [lo, hi), thinned."""
    a, b = np.searchsorted(m.rows, lo, "left"), np.searchsorted(m.rows, hi, "left")
    return thin(np.arange(a, b), max_points)


def _line_data(chart: Chart, panel: Panel, lo: int, hi: int, max_points: int) -> list[dict[str, Any]]:
    """Per line of `panel`, its points in rows [lo, hi): the group's decimated rows, less the
    ones inside a run of equal values (step_points) when drawn as a plain line."""
    rows = select_rows([line.y for line in panel.lines], lo, hi, max_points)
    x = chart.x[rows]
    mode = "lines+markers" if len(rows) <= MARKERS_MODE_BELOW else "lines"
    out = []
    for line in panel.lines:
        own = rows
        if mode == "lines" and not line.markers_only:  # a marker at each point is what it shows
            own = rows[step_points(x, line.y[rows])]
        out.append({"x": chart.x[own].tolist(), "y": _values(line, own), "mode": mode})
    return out


def _marker_data(chart: Chart, m: Markers, idx: np.ndarray) -> dict[str, list[Any]]:
    return {
        "x": chart.x[m.rows[idx]].tolist(),
        "y": [m.y[i] for i in idx.tolist()],
        "hovertext": [m.text(i) for i in idx.tolist()],
    }


def _range_rows(chart: Chart, x_range: XRange) -> tuple[int, int]:
    return row_range(chart.x, *(x_range or (None, None)))


def trace_data(chart: Chart, x_range: XRange = None, max_points: int = MAX_POINTS) -> list[dict[str, Any]]:
    """Per figure trace, the arrays to send for the visible range (and the line mode)."""
    lo, hi = _range_rows(chart, x_range)
    out: list[dict[str, Any]] = []
    for panel in chart.panels:
        if not panel.lines:
            continue
        out += _line_data(chart, panel, lo, hi, max_points)
    for m in chart.markers:
        out.append(_marker_data(chart, m, _marker_rows(m, lo, hi, min(max_points, MAX_MARKERS))))
    return out


def whole_range(steps: np.ndarray) -> list[float] | None:
    """The x range of every step in `steps` (ascending), as autorange would draw a step line
    (half a step either side), or None for no step."""
    if not len(steps):
        return None
    return [float(steps[0]) - 0.5, float(steps[-1]) + 0.5]


def selected_shape(step: int | None) -> list[dict[str, Any]]:
    if step is None:
        return []
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": step,
            "x1": step,
            "y0": 0,
            "y1": 1,
            "line": {"color": "rgba(40,40,40,0.55)", "width": 1.5, "dash": "dot"},
        }
    ]


def _axes(panel: int) -> dict[str, str]:
    """Row `panel`'s (0-based) axes: its own y axis, the one x axis every row shares (_stacked_layout)."""
    return {"xaxis": "x", "yaxis": f"y{panel + 1}" if panel else "y"}


def _legend(panel: int) -> str:
    return "legend" if panel == 0 else f"legend{panel + 1}"


def _line_trace(line: Line, data: dict[str, Any], panel: int) -> dict[str, Any]:
    style = {"color": line.color, "width": line.width, "shape": "hv"}
    if line.dash is not None:
        style["dash"] = line.dash
    trace = {
        "type": "scatter",
        "x": data["x"],
        "y": data["y"],
        "name": line.name,
        "mode": "markers" if line.markers_only else data["mode"],
        "line": style,
        "marker": {
            "size": 8 if line.markers_only else 5,
            "color": line.color,
            "symbol": "x" if line.markers_only else "circle",
        },
        "legend": _legend(panel),
        "hovertemplate": f"{html.escape(line.name)}: %{{y}}<extra></extra>",
        **_axes(panel),
    }
    if line.fill:
        trace.update(fill="tozeroy", fillcolor=_light(line.color))
    return trace


def _marker_trace(m: Markers, data: dict[str, Any], panel: int) -> dict[str, Any]:
    # Few points, each a DOM element that can be hovered and clicked.
    return {
        "type": "scatter",
        "x": data["x"],
        "y": data["y"],
        "hovertext": data["hovertext"],
        "name": m.name,
        "mode": "markers",
        "marker": {"size": 12, "color": m.color, "symbol": m.symbol, "line": {"width": 1, "color": "#222"}},
        "legend": _legend(panel),
        "hovertemplate": "%{hovertext}<extra></extra>",
        **_axes(panel),
    }


def _light(color: str, amount: float = 0.55) -> str:
    """The colour mixed with white, opaque (so a band drawn over another hides it)."""
    c = color.lstrip("#")
    r, g, b = (round(int(c[i : i + 2], 16) * (1 - amount) + 255 * amount) for i in (0, 2, 4))
    return f"rgb({r},{g},{b})"


# Every figure_dict and every Patch that changes a trace's arrays carries a new `datarevision`.
# Given one, plotly.js compares it instead of the identity of every array in the figure. That
# matters on a zoom: dcc.Graph copies the new axis range into its `figure` prop and re-plots
# it, and Dash's copy of the layout shares no array with the one plotly holds, so without a
# revision every array, and the template object, counts as changed and that copy is redrawn
# in full: about as long as the zoom's own redraw (docs/performance-history.md).
_revisions = itertools.count(1)


def _revision() -> int:
    return next(_revisions)


# plotly_white, written into the layout itself: a `template` object is compared by identity
# on each Plotly.react, so it would undo what the revision saves. Only what these figures use.
LOOK = {
    "font": {"color": "#2a3f5f"},
    "paper_bgcolor": "white",
    "plot_bgcolor": "white",
    "hoverlabel": {"align": "left"},
    "autotypenumbers": "strict",
}
# Every chart's axes leave their margins as set (MARGIN here, the why views' own): plotly.js's
# automargin measures every tick label once a figure is drawn and, when a margin should move,
# draws it all again. That was about half of the first figure's drawing (210 ms of a 200k-step
# timeline's Plotly.newPlot, 100 ms without), and a zoom's new y ranges were measured again. For
# the same reason no tick label is measured to hide one past the figure's edge (the margins hold
# them: "allow"), nor an x axis's to choose their angle (level: XAXIS_LOOK).
AXIS_LOOK = {
    "gridcolor": "#EBF0F8",
    "linecolor": "#EBF0F8",
    "zerolinecolor": "#EBF0F8",
    "zerolinewidth": 2,
    "ticks": "",
    "automargin": False,
    "ticklabeloverflow": "allow",
}
XAXIS_LOOK = {**AXIS_LOOK, "tickangle": 0}
# Room for the flag kinds' names at the left, the legends at the right, the x axis's title below.
MARGIN = {"l": 100, "r": 230, "t": 30, "b": 45}


def _domains(weights: Sequence[float]) -> list[list[float]]:
    """Each row's y domain, top row first: heights in proportion to `weights`, a fixed gap
    between rows (make_subplots' arithmetic, tests/web/test_figures.py)."""
    n = len(weights)
    gap = 0.035 if n < 8 else 0.028
    heights = [(1.0 - gap * (n - 1)) * (w / float(sum(weights))) for w in weights]
    out = []
    for p in range(n):
        below = heights[p + 1 :]
        y0 = sum(below) + len(below) * gap
        out.append([y0, y0 + heights[p]])
    return out


def _stacked_layout(panels: Sequence[Panel]) -> dict[str, Any]:
    """Rows of panels under one x axis, drawn under the last row; each row its own y axis, title
    and legend. Written as plain dicts: make_subplots and plotly's validation of each property
    took 0.12 s (0.27 s under a profiler) for the timeline, on the server's source thread while
    the page's first figure was owed, where the figure's data takes 30 ms.

    One x axis for every row, not make_subplots' one per row matched to the last: plotly.js
    then drew all of them on every redraw, and a zoom's range, copied back by dcc.Graph into the
    one axis the event names, made the others differ and redrew them all again.
    """
    n = len(panels)
    layout: dict[str, Any] = {
        **LOOK,
        "margin": MARGIN,
        "hovermode": "x",
        "annotations": [],
        "xaxis": {
            "anchor": f"y{n}" if n > 1 else "y",
            "domain": [0.0, 1.0],
            "type": "linear",
            "title": {"text": labels.STEP_AXIS},
            "autorange": True,
            **XAXIS_LOOK,
        },
    }
    notes = []
    for p, (panel, domain) in enumerate(zip(panels, _domains([q.weight for q in panels]), strict=True)):
        y = f"y{p + 1}" if p else "y"
        # Every axis's type said, so plotly.js does not guess it from the data on each redraw (it
        # tries each value as a date: a few percent of a zoom's drawing). `autorange` said too:
        # plotly.js writes it into the layout it holds, so the figure Dash holds stays alike.
        auto = {} if "range" in panel.yaxis else {"autorange": True}
        layout[f"yaxis{p + 1}" if p else "yaxis"] = {
            "anchor": "x",
            "domain": domain,
            "type": "linear",
            **AXIS_LOOK,
            **auto,
            **panel.yaxis,
        }
        layout["annotations"].append(
            {
                "font": {"size": 12},
                "showarrow": False,
                "text": panel.title,
                "x": 0.5,
                "xanchor": "center",
                "xref": "paper",
                "y": domain[1],
                "yanchor": "bottom",
                "yref": "paper",
            }
        )
        layout[_legend(p)] = {
            "x": 1.01,
            "y": domain[1],
            "yanchor": "top",
            "xanchor": "left",
            "font": {"size": 11},
            "bgcolor": "rgba(255,255,255,0)",
            "traceorder": "normal",
        }
        if panel.note:
            notes.append(
                {
                    "font": {"color": "#888"},
                    "showarrow": False,
                    "text": panel.note,
                    "x": 0.5,
                    "xref": "x domain",
                    "y": 0.5,
                    "yref": f"{y} domain",
                }
            )
    layout["annotations"] += notes  # after every title, as make_subplots adds them
    # Sized by its page (each dcc.Graph sets its height), so no `height`, which plotly.js would
    # drop for `autosize` at its first resize anyway. build_figure gives its own figure the
    # chart's height.
    return layout


def figure_dict(
    chart: Chart,
    x_range: XRange = None,
    max_points: int = MAX_POINTS,
    *,
    selected: int | None = None,
    title: str | None = None,
    uirevision: str = "chart",
) -> dict[str, Any]:
    """The whole figure for the visible range, as plotly.js takes it: plain dicts and lists (what
    go.Figure(...).to_dict() gives, tests/web/test_figures.py), so Dash's encoder writes it in one
    orjson pass; a plotly Figure object has it walk every list in Python first."""
    layout = _stacked_layout(chart.panels)  # 25 µs for the timeline: built afresh for each figure
    layout["uirevision"] = uirevision
    layout["datarevision"] = _revision()
    if selected is not None:
        layout["shapes"] = selected_shape(selected)
    if title:
        layout["title"] = {"text": title, "x": 0.01, "font": {"size": 14}}
        layout["margin"] = {**layout["margin"], "t": 60}
    if x_range is not None:
        layout["xaxis"] = {**layout["xaxis"], "range": list(x_range), "autorange": False}
    data = [
        _line_trace(item, d, panel) if isinstance(item, Line) else _marker_trace(item, d, panel)
        for (panel, item), d in zip(chart.traces(), trace_data(chart, x_range, max_points), strict=True)
    ]
    return {"data": data, "layout": layout}


def build_figure(
    chart: Chart,
    x_range: XRange = None,
    max_points: int = MAX_POINTS,
    *,
    selected: int | None = None,
    title: str | None = None,
    uirevision: str = "chart",
) -> go.Figure:
    """figure_dict as a plotly Figure (validated), for what needs one: a download, the compare
    and engines pages. Its template is plotly_white, as the look figure_dict writes out, and its
    height the chart's."""
    fig = go.Figure(
        figure_dict(chart, x_range, max_points, selected=selected, title=title, uirevision=uirevision)
    )
    fig.update_layout(height=chart.height, template="plotly_white")
    return fig


def range_patch(
    chart: Chart, x_range: XRange, max_points: int = MAX_POINTS, patch: Patch | None = None
) -> Patch:
    """Re-decimated arrays of every trace for a new visible range; the layout is left alone."""
    return range_update(chart, x_range, max_points, patch)[0]


def range_update(
    chart: Chart, x_range: XRange, max_points: int = MAX_POINTS, patch: Patch | None = None
) -> tuple[Patch, int]:
    """range_patch, and the most points any line trace now holds in the browser."""
    patch = patch if patch is not None else Patch()
    data = trace_data(chart, x_range, max_points)
    for i, d in enumerate(data):
        for key, value in d.items():
            patch["data"][i][key] = value
    patch["layout"]["datarevision"] = _revision()
    return patch, held_points(data)


def held_points(data: list[dict[str, Any]]) -> int:
    return max((len(d["x"]) for d in data if "mode" in d), default=0)


def extend_patch(chart: Chart, old_rows: int, patch: Patch | None = None) -> Patch:
    """Append rows [old_rows, len) to every trace, in place (the live view's tick)."""
    patch = patch if patch is not None else Patch()
    n = len(chart.x)
    if n <= old_rows:
        return patch
    new_rows = np.arange(old_rows, n)
    x_new = chart.x[new_rows].tolist()
    i = 0
    for panel in chart.panels:
        for line in panel.lines:
            patch["data"][i]["x"].extend(x_new)
            patch["data"][i]["y"].extend(_values(line, new_rows))
            i += 1
    for m in chart.markers:
        idx = np.arange(np.searchsorted(m.rows, old_rows, "left"), len(m.rows))
        if len(idx):
            d = _marker_data(chart, m, idx)
            for key in ("x", "y", "hovertext"):
                patch["data"][i][key].extend(d[key])
        i += 1
    patch["layout"]["datarevision"] = _revision()
    return patch
