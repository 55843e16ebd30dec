"""The timeline page's why views, under the timeline: the waiting requests by the constraint that
held them (a stacked area per reason), and a request Gantt (one lane per request, coloured by
state and reason, tracer.analysis.reasons.Reason.color: the TUI's requests view's colours) whose
click opens that request's `why` (tracer.render.why.story_lines) in a panel beside it.

Both follow the timeline's zoom, once it has stood still for WHY_DELAY_MS. The series are
tracer.analysis.request_lanes' (Session.waiting_by_reason, decimated as the timeline is); the
lanes are read for the visible steps, bounded (request_lanes.MAX_WINDOW steps, MAX_LANES lanes;
the Gantt's title says what was left out).
"""

from __future__ import annotations

import html as html_text
from typing import Any

from dash import Dash, Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from tracer.analysis.reasons import color, label
from tracer.analysis.request_lanes import (
    CLIPPED,
    MAX_LANES,
    PREEMPTED,
    SCHEDULED,
    UNSCHEDULED,
    WAITING,
    RequestLanes,
)
from tracer.render import empty, labels
from tracer.render.why import lanes_note, no_story_line, segment_text, state_label, story_lines
from web.chart import AXIS_LOOK, LOOK, MARGIN, XAXIS_LOOK, whole_range
from web.decimate import MAX_POINTS, parse_xrange, row_range, select_rows
from web.model import TraceView
from web.store import TraceStore

# Component ids.
WAITING_GRAPH = "waiting-by-reason"
GANTT = "request-gantt"
WHY_PANEL = "request-why"
WHY_RANGE = "why-range"  # the timeline's relayoutData, once the zoom has stood still

# The why views follow a zoom this long after it, and not at all if another comes first. Their
# answers (a Gantt's lanes cost 0.2-0.3 s of the server's time at 256 running, and its redraw
# 50-120 ms of the page's) otherwise landed in the middle of the next zoom, which waited behind
# them: the timeline, which the user is looking at, comes first (docs/performance-history.md).
WHY_DELAY_MS = 300
WHY_RANGE_JS = """
function(relayout) {
    const pending = window.__schedscopeWhyRange;
    if (pending) { clearTimeout(pending.timer); pending.resolve(window.dash_clientside.no_update); }
    return new Promise(resolve => {
        const entry = {resolve: resolve};
        entry.timer = setTimeout(() => {
            window.__schedscopeWhyRange = null;
            resolve(relayout === undefined ? null : relayout);
        }, DELAY);
        window.__schedscopeWhyRange = entry;
    });
}
""".replace("DELAY", str(WHY_DELAY_MS))

# A state's bar pattern (the colour is the reason's).
PATTERN = {SCHEDULED: "", CLIPPED: "", UNSCHEDULED: ".", WAITING: "/", PREEMPTED: "x"}
STATE_ORDER = (SCHEDULED, CLIPPED, UNSCHEDULED, WAITING, PREEMPTED)
LANE_PX = 18
LABEL_CHARS = 20

XRange = list[float] | None


def lane_label(rid: str) -> str:
    return rid if len(rid) <= LABEL_CHARS else "…" + rid[-(LABEL_CHARS - 1) :]


def waiting_figure(view: TraceView, x_range: XRange = None, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """Waiting request-steps per step, stacked by the reason that held them. Plain dicts, as
    web.chart's figures: plotly's objects cost more than the data (30-50 ms a call at 200k
    steps), and both why views are redrawn on every zoom, beside the timeline's next answer."""
    series = view.session.waiting_by_reason
    steps = view.steps
    lo, hi = row_range(steps, *(x_range or (None, None)))
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        **LOOK,
        "title": _title(labels.WAITING_FIGURE),
        "height": 260,
        "margin": {**MARGIN, "t": 40},  # the timeline's, so the step axes line up
        "hovermode": "x",
        "legend": {"x": 1.01, "y": 1, "font": {"size": 11}},
        "uirevision": view.key,
        "xaxis": {"title": {"text": labels.STEP_AXIS}, **XAXIS_LOOK},
        "yaxis": {"title": {"text": labels.WAITING_AXIS}, "rangemode": "tozero", **AXIS_LOOK},
    }
    if series:
        rows = select_rows(list(series.values()), lo, hi, max_points)
        x = steps[rows].tolist()
        for code, values in series.items():
            data.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": values[rows].tolist(),
                    "name": f"{label(code)} ({int(values.sum())})",
                    "mode": "lines",
                    "stackgroup": "waiting",
                    "line": {"color": color(code), "width": 0.5, "shape": "hv"},
                    "fillcolor": color(code),
                    "hovertemplate": f"{html_text.escape(label(code))}: %{{y}}<extra></extra>",
                }
            )
    else:
        layout["annotations"] = [
            {
                "text": empty.NO_WAITING,
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
            }
        ]
    if x_range is not None:
        layout["xaxis"].update(range=list(x_range), autorange=False)
    elif len(steps):
        layout["xaxis"]["range"] = whole_range(steps)
    return {"data": data, "layout": layout}


def gantt_figure(view: TraceView, lanes: RequestLanes) -> dict[str, Any]:
    """One lane per request; a bar per segment, coloured by reason, patterned by state (plain
    dicts, as waiting_figure)."""
    lane_names = [lane_label(lane.id) for lane in lanes.lanes]
    groups: dict[tuple[str, str], dict[str, list[Any]]] = {}
    for lane, name in zip(lanes.lanes, lane_names, strict=True):
        for seg in lane.segments:
            g = groups.setdefault((seg.state, seg.code), {"x": [], "base": [], "y": [], "custom": []})
            g["x"].append(seg.last - seg.first + 1)
            g["base"].append(seg.first - 0.5)
            g["y"].append(name)
            g["custom"].append([lane.id, segment_text(seg)])
    order = {s: i for i, s in enumerate(STATE_ORDER)}
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "x": g["x"],
            "base": g["base"],
            "y": g["y"],
            "customdata": g["custom"],
            "name": state_label(state, code),
            "marker": {
                "color": color(code),
                "pattern": {"shape": PATTERN[state], "fgcolor": "#333", "size": 6, "solidity": 0.3},
                "line": {"width": 0},
            },
            "hovertemplate": "%{customdata[0]}<br>%{customdata[1]}<extra></extra>",
        }
        for (state, code), g in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))
    ]
    note = lanes_note(lanes)
    xaxis: dict[str, Any] = {"title": {"text": labels.GANTT_AXIS}, **XAXIS_LOOK}
    if lanes.lanes:
        xaxis["range"] = [lanes.first_step - 0.5, lanes.last_step + 0.5]
    layout = {
        **LOOK,
        "title": _title(labels.gantt_title(html_text.escape(note))),
        "barmode": "overlay",
        "bargap": 0.15,
        "height": 120 + LANE_PX * max(1, len(lane_names)),
        "margin": {"l": 170, "r": 230, "t": 40, "b": 40},
        "legend": {"x": 1.01, "y": 1, "font": {"size": 11}, "traceorder": "normal"},
        "hovermode": "closest",
        "uirevision": view.key,
        "xaxis": xaxis,
        "yaxis": {
            "categoryorder": "array",
            "categoryarray": lane_names[::-1],
            "tickfont": {"size": 10, "family": "monospace"},
            **AXIS_LOOK,
        },
    }
    return {"data": data, "layout": layout}


def _title(text: str) -> dict[str, Any]:
    return {"text": text, "font": {"size": 13}, "x": 0.05}  # plotly_white's title place


def why_panel(view: TraceView | None, request_id: str | None) -> list[Any]:
    if view is None or not request_id:
        return [html.P(empty.WHY_HINT, className="muted")]
    story = view.session.request_story(request_id)
    if story is None:
        return [html.P(no_story_line(request_id))]
    text = html.Pre(
        "\n".join(story_lines(story)),
        id="request-why-text",
        style={"background": "#f6f6f6", "padding": "8px", "fontSize": "13px", "whiteSpace": "pre-wrap"},
    )
    return [html.H5(labels.why_title(request_id), id="request-why-title"), text]


def why_section() -> list[Any]:
    """The components under the timeline graph."""
    return [
        dcc.Graph(id=WAITING_GRAPH, config={"displaylogo": False}, style={"height": "260px"}),
        dcc.Graph(id=GANTT, config={"displaylogo": False}),
        html.Div(why_panel(None, None), id=WHY_PANEL, style={"padding": "0 16px"}),
        dcc.Store(id=WHY_RANGE),
    ]


def _x_range(relayout: dict[str, Any] | None, current: XRange) -> tuple[bool, XRange]:
    changed, x_range = parse_xrange(relayout)
    return (True, x_range) if changed else (False, current)


class WhyHandlers:
    """The why views' callbacks as plain methods (testable without a browser)."""

    def __init__(
        self, store: TraceStore, *, max_points: int = MAX_POINTS, max_lanes: int = MAX_LANES
    ) -> None:
        self.store = store
        self.max_points = max_points
        self.max_lanes = max_lanes

    def waiting(self, key: str | None, relayout: dict[str, Any] | None) -> dict[str, Any]:
        view = self.store.get(key)
        if view is None:
            raise PreventUpdate
        return waiting_figure(view, _x_range(relayout, None)[1], self.max_points)

    def lanes(self, view: TraceView, x_range: XRange) -> RequestLanes:
        lo, hi = row_range(view.steps, *(x_range or (None, None)))
        return view.session.request_lanes(lo, hi, max_lanes=self.max_lanes)

    def gantt(self, key: str | None, relayout: dict[str, Any] | None) -> dict[str, Any]:
        view = self.store.get(key)
        if view is None:
            raise PreventUpdate
        return gantt_figure(view, self.lanes(view, _x_range(relayout, None)[1]))

    def why(self, click: dict[str, Any] | None, key: str | None) -> list[Any]:
        points = (click or {}).get("points") or []
        custom = points[0].get("customdata") if points else None
        if not custom:
            raise PreventUpdate
        return why_panel(self.store.get(key), str(custom[0]))


def register_why(app: Dash, h: WhyHandlers, *, trace: str, version: str, graph: str) -> None:
    """The why views' callbacks; `trace`, `version` and `graph` are the page's trace menu, its
    version store and the timeline graph (web.layout's ids: layout lays this module out)."""

    app.clientside_callback(WHY_RANGE_JS, Output(WHY_RANGE, "data"), Input(graph, "relayoutData"))

    @app.callback(
        Output(WAITING_GRAPH, "figure"),
        Input(trace, "value"),
        Input(version, "data"),
        Input(WHY_RANGE, "data"),
    )
    def _waiting(key, _version, relayout):  # type: ignore[no-untyped-def]
        return h.waiting(key, relayout)

    @app.callback(
        Output(GANTT, "figure"),
        Input(trace, "value"),
        Input(version, "data"),
        Input(WHY_RANGE, "data"),
    )
    def _gantt(key, _version, relayout):  # type: ignore[no-untyped-def]
        return h.gantt(key, relayout)

    @app.callback(
        Output(WHY_PANEL, "children"),
        Input(GANTT, "clickData"),
        State(trace, "value"),
        prevent_initial_call=True,
    )
    def _why(click, key):  # type: ignore[no-untyped-def]
        return h.why(click, key)
