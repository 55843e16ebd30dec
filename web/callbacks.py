"""Callbacks. Each is a plain method of Handlers (testable without a browser or
a server); register() wires them to the app, passing Dash's triggered id in.

The timeline figure has one writer (Handlers.timeline): a new trace sends a whole
figure, everything after that sends a Patch (a zoom re-decimates the arrays, a
live tick extends them, a selection moves the marker line).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from dash import ALL, Dash, Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from tracer.render import empty, labels
from tracer.trace.source import Phase
from web import layout as ids
from web.chart import (
    build_figure,
    extend_patch,
    figure_dict,
    range_patch,
    range_update,
    selected_shape,
    whole_range,
)
from web.compare_view import compare_chart, headline, totals_children
from web.decimate import MAX_POINTS, Range, parse_xrange
from web.engines_view import engine_of_trace, engines_chart
from web.export import figure_html, figure_png
from web.flagtable import JUMP, filter_flags, page, table
from web.inspector import inspector
from web.model import RunView, TraceView
from web.store import TraceStore, UploadError
from web.timeline import timeline_chart

LIVE = "live"
# The longest a page's first figure holds the sources' parsing (Handlers.page_opened).
FIRST_FIGURE_HOLD = 3.0


def _state(view: TraceView, sent: int) -> dict[str, Any]:
    """What the browser holds: which trace and version, its rows, the visible range, the most
    points any line trace carries (`sent`: a live tick may extend up to the budget)."""
    return {
        "key": view.key,
        "run": _run_of(view),
        "version": view.version,
        "rows": len(view),
        "range": None,
        "sent": sent,
    }


class Handlers:
    def __init__(
        self,
        store: TraceStore,
        *,
        max_points: int = MAX_POINTS,
        feeds: Sequence[Any] = (),
        run: RunView | None = None,
    ) -> None:
        self.store = store
        self.max_points = max_points
        self.feeds = list(feeds)  # web.follow.StoreFeed: their sources' states make the live status
        self.run = run  # the engines of a data-parallel run (--engines), or None
        # The last full figure of each trace, by version. The page ticks every 0.3 s and Dash
        # drops a callback's answer once a newer request for it is out: a figure that takes
        # longer than a tick to build would be rebuilt, and dropped, forever. Built once (one
        # builder at a time), every later request answers at once.
        self._figures: dict[str, tuple[TraceView, Any, int]] = {}
        self._figure_lock = threading.Lock()
        self._first_shown = False  # a page has shown a figure (ticks_done)

    def page_opened(self) -> None:
        """The page was asked for. Until a page shows its first figure (ticks_done), a source
        still reading a complete file is held (FIRST_FIGURE_HOLD at most): the page's files, its
        layout and its figure are then served, and drawn, without the parse taking the GIL
        (every socket write of the server's threads waits for it) and one of the cores."""
        if not self._first_shown:
            for feed in self.feeds:
                feed.source.hold(FIRST_FIGURE_HOLD)

    def prepare(self, view: TraceView) -> None:
        """A source's new snapshot, on the source's thread: the first one's whole-run figure is
        built there and then, so the page's first request does not pay plotly's lazy imports and
        the layout frame (about 0.4 s), against the source's parsing for the GIL."""
        if view.key not in self._figures:
            self._full_figure(view)

    def live_status(self) -> str:
        return " · ".join(status for feed in self.feeds if (status := feed.status))

    # -- timeline -----------------------------------------------------------------------
    def timeline(
        self,
        trigger: str | None,
        key: str | None,
        relayout: dict[str, Any] | None,
        selected: dict[str, Any] | None,
        state: dict[str, Any] | None,
        follow_tail: list[str] | None,
    ) -> tuple[Any, Any, Any, Any]:
        """-> (figure or Patch, view state, data version, live status)."""
        view = self.store.get(key)
        status = self.live_status()
        if view is None:
            if trigger == ids.TICK:
                return no_update, no_update, no_update, status
            msg = status or empty.NO_TRACE_UPLOAD
            return _empty_figure(msg), None, "", status  # "": shown, nothing yet (ticks_done)
        if (
            trigger in (None, ids.TRACE)
            or not state
            or state.get("key") != view.key
            or state.get("run", _run_of(view)) != _run_of(view)  # a live stream's new run
        ):
            fig, sent = self._full_figure(view)
            # The range the graph's relayoutData holds is not this figure's zoom: a tick must not
            # take it for a zoom's superseded answer.
            return fig, {**_state(view, sent), "zoomed": parse_xrange(relayout)[1]}, _version(view), status
        if trigger == ids.GRAPH:
            changed, x_range = parse_xrange(relayout)
            if not changed:
                raise PreventUpdate
            return self._zoom(view, state, x_range, status)
        if trigger == ids.SELECTED:
            step = (selected or {}).get("step") if (selected or {}).get("key") == view.key else None
            return self._select(view, state, step), {**state, "selected": step}, no_update, status
        if trigger == ids.TICK:
            changed, x_range = parse_xrange(relayout)
            if changed and x_range != state.get("zoomed"):
                # Dash drops an answer once a newer request for its output is out: a tick asked
                # while a zoom's answer was on its way superseded it, so the tick zooms (the
                # tail, if followed, from the next tick on, at the zoom's width).
                return self._zoom(view, state, x_range, status)
            return self._tick(view, state, bool(follow_tail), status)
        raise PreventUpdate

    def _zoom(self, view: TraceView, state: dict[str, Any], x_range: Range, status: str) -> tuple[Any, ...]:
        patch, sent = range_update(timeline_chart(view), x_range, self.max_points)
        # The arrays now hold every step of this view: a later tick extends from here.
        held = {"range": x_range, "zoomed": x_range, "sent": sent, "rows": len(view), "version": view.version}
        # The data version moves only if the zoom brought a newer snapshot: setting it again
        # would rerun every callback that follows it (inspector, flags, summary, ...) per zoom.
        version = _version(view) if state.get("version") != view.version else no_update
        return patch, {**state, **held}, version, status

    def _full_figure(self, view: TraceView) -> tuple[Any, int]:
        """(the whole-run figure of `view`, points per trace sent), built once per snapshot
        (a view is one snapshot: a new version, or an upload under the same key, is a new one)."""
        with self._figure_lock:
            held = self._figures.get(view.key)
            if held is None or held[0] is not view:
                chart = timeline_chart(view)
                # The whole run as an explicit range, not autorange: plotly.js fills in an
                # autoranged axis's `rangemode`, which a zoom then drops, and that difference
                # redraws the whole figure once more on the first zoom's sync.
                fig = figure_dict(chart, whole_range(chart.x), self.max_points, uirevision=view.key)
                lines = sum(len(panel.lines) for panel in chart.panels)  # the first traces (web.chart)
                sent = max((len(t["x"]) for t in fig["data"][:lines]), default=0)
                held = self._figures[view.key] = (view, fig, sent)
            return held[1], held[2]

    def _select(self, view: TraceView, state: dict[str, Any], step: int | None) -> Patch:
        patch = Patch()
        patch["layout"]["shapes"] = selected_shape(step)
        x_range = state.get("range")
        if step is not None and x_range is not None and not x_range[0] <= step <= x_range[1]:
            # Jump: centre the step in a window of the current width, re-decimated.
            half = (x_range[1] - x_range[0]) / 2
            x_range = [step - half, step + half]
            _, state["sent"] = range_update(timeline_chart(view), x_range, self.max_points, patch)
            patch["layout"]["xaxis"]["range"] = x_range
            patch["layout"]["xaxis"]["autorange"] = False
            state.update(range=x_range, rows=len(view), version=view.version)
        return patch

    def _tick(
        self, view: TraceView, state: dict[str, Any], follow_tail: bool, status: str
    ) -> tuple[Any, ...]:
        if view.version == state.get("version") or len(view) <= state.get("rows", 0):
            if view.version == state.get("version"):
                return no_update, no_update, no_update, status
            return no_update, {**state, "version": view.version}, _version(view), status
        chart = timeline_chart(view)
        old, new = state["rows"], len(view)
        x_range = state.get("range")
        if follow_tail and x_range is not None:
            width = x_range[1] - x_range[0]
            last = float(view.steps[-1])
            x_range = [last - width + 0.5, last + 0.5]
        sent = state.get("sent", self.max_points)
        if sent + (new - old) <= self.max_points:
            patch = extend_patch(chart, old)  # only the new steps travel
            sent += new - old
        else:  # over the budget: re-decimate, leaving a quarter of it for the next ticks' steps
            patch, sent = range_update(chart, x_range, self.max_points * 3 // 4)
        if x_range != state.get("range"):
            patch["layout"]["xaxis"]["range"] = x_range
            patch["layout"]["xaxis"]["autorange"] = False
        elif x_range is None:  # the whole run shown (_full_figure): it now ends later
            patch["layout"]["xaxis"]["range"] = whole_range(chart.x)
        first_marker = sum(len(p.lines) for p in chart.panels)
        for i, m in enumerate(chart.markers):  # legend counts
            patch["data"][first_marker + i]["name"] = m.name
        new_state = {**state, "version": view.version, "rows": new, "range": x_range, "sent": sent}
        return patch, new_state, _version(view), status

    # -- selection, inspector, flags, summary --------------------------------------------
    def select(
        self, trigger: str | dict[str, Any] | None, key: str | None, click: dict[str, Any] | None, value: Any
    ) -> Any:
        """The selected step: from a click on the timeline, or a flag table step button."""
        if trigger == ids.GRAPH and click and click.get("points"):
            return {"key": key, "step": round(float(click["points"][0]["x"]))}
        if isinstance(trigger, dict) and trigger.get("type") == JUMP:
            if not value:  # the buttons were just (re)drawn, not clicked
                raise PreventUpdate
            return {"key": key, "step": int(trigger["step"])}
        return None

    def inspect(self, selected: dict[str, Any] | None, key: str | None) -> list[Any]:
        if not selected or selected.get("key") != key:
            return inspector(None, None)
        return inspector(self.store.get(key), selected.get("step"))

    def flag_table(
        self, trigger: Any, key: str | None, kinds: list[str] | None, text: str | None, current: int | None
    ) -> tuple[Any, str, int]:
        """-> (table, "page i of n", page). Filters and a new trace go back to the first page."""
        view = self.store.get(key)
        found = filter_flags(view.report.flags, kinds, text) if view is not None else np.zeros(0, np.int64)
        if trigger == ids.FLAG_NEXT:
            current = (current or 0) + 1
        elif trigger == ids.FLAG_PREV:
            current = (current or 0) - 1
        elif trigger != ids.VERSION:
            current = 0
        shown, current, count = page(found, current)
        rows = view.report.flags.take(shown) if view is not None else []
        total = len(view.report.flags) if view is not None else 0
        return table(rows, total), empty.flag_page(current + 1, count, len(found)), current

    def summary(self, key: str | None) -> Any:
        view = self.store.get(key)
        if view is None:
            return html.Span(empty.NO_TRACE)
        return html.Div([html.B(view.label), " — ", view.summary()])

    # -- upload --------------------------------------------------------------------------
    def upload(self, gate: dict[str, Any] | None) -> tuple[Any, ...]:
        """-> (trace options, selected trace, message, compare-A options, compare-B options)."""
        if not gate or not gate.get("contents"):
            raise PreventUpdate
        try:
            view = self.store.open_upload(gate["contents"], gate.get("filename") or "upload")
        except UploadError as exc:
            msg = html.Span(empty.upload_failed(exc), className="error", id="upload-error")
            return no_update, no_update, msg, no_update, no_update
        options = self.store.options()
        msg = html.Span(empty.upload_opened(view.label, len(view)), className="ok")
        return options, view.key, msg, options, options

    # -- live controls -------------------------------------------------------------------
    def ticks_done(self, shown: str | None, pause_clicks: int | None = None) -> Any:
        """Whether the page's ticks are off, each time a figure is shown (`shown`: its version).

        They start off and the first figure turns them on: a tick's request while the first
        figure is on its way had the whole figure sent, and drawn, again (Dash reads the page's
        view state before the answer lands). They go off again (True) once every source is a
        complete file, read to its end, and the page shows the last snapshot: a tick's request
        would otherwise supersede a zoom's on the same figure, and Dash drops the zoom's
        answer. A paused page is left paused. The first figure shown releases the sources'
        hold (page_opened)."""
        if shown and not self._first_shown:
            self._first_shown = True
            for feed in self.feeds:
                feed.source.release()
        if not self.feeds or self.pause(pause_clicks)[0]:
            return no_update
        if any(f.source.live for f in self.feeds):
            return False
        if any(f.source.state.phase not in (Phase.COMPLETE, Phase.FAILED) for f in self.feeds):
            return False
        view = self.store.get((shown or "").rpartition(":")[0])
        return view is not None and _version(view) == shown

    def pause(self, n_clicks: int | None) -> tuple[bool, str]:
        paused = bool(n_clicks) and n_clicks % 2 == 1
        return paused, labels.RESUME if paused else labels.PAUSE

    # -- compare -------------------------------------------------------------------------
    def compare(
        self,
        trigger: str | None,
        tab: str | None,
        key_a: str | None,
        key_b: str | None,
        relayout: dict[str, Any] | None,
        state: dict[str, Any] | None,
    ) -> tuple[Any, ...]:
        """-> (figure or Patch, headline, totals, compare state). Computed only while the tab is open."""
        if tab != "compare":
            raise PreventUpdate
        found = self.store.compared(key_a, key_b)
        if found is None:
            msg = empty.COMPARE_NEEDS_TWO
            return _empty_figure(msg), html.P(msg), None, None
        joint, c, cache_key = found
        chart = joint.once("chart", lambda: compare_chart(c))  # kept with the comparison
        same_pair = bool(state) and state.get("pair") == [key_a, key_b]
        # Until the browser holds this pair's figure, every trigger builds it: Dash keeps only the
        # newest answer of a callback, so the graph's own first relayout must not answer "no update".
        if trigger == ids.CMP_GRAPH and same_pair:
            changed, x_range = parse_xrange(relayout)
            if not changed:
                raise PreventUpdate
            patch = range_patch(chart, x_range, self.max_points)
            return patch, no_update, no_update, {**state, "range": x_range, "key": cache_key}
        if same_pair and state.get("key") == cache_key:
            raise PreventUpdate  # back on the tab, or a tick that changed neither side
        lines = [html.P(s) for s in headline(c)]
        if same_pair:  # a followed side grew: new arrays, same figure
            patch = range_patch(chart, state.get("range"), self.max_points)
            return patch, lines, totals_children(c), {**state, "key": cache_key}
        fig = build_figure(chart, None, self.max_points, uirevision=cache_key)
        return fig, lines, totals_children(c), {"key": cache_key, "pair": [key_a, key_b], "range": None}

    # -- engines -------------------------------------------------------------------------
    def engines_zoom(self, relayout: dict[str, Any] | None) -> Patch:
        """The engines' lanes re-decimated for a new visible step range."""
        changed, x_range = parse_xrange(relayout)
        if self.run is None or not changed:
            raise PreventUpdate
        return range_patch(engines_chart(self.run), x_range, self.max_points)

    def engines_open(self, click: dict[str, Any] | None) -> tuple[str, str]:
        """A click on an engine's lane -> (that engine's trace key, the timeline tab)."""
        points = (click or {}).get("points") or []
        engine = (
            engine_of_trace(self.run, int(points[0].get("curveNumber", -1))) if self.run and points else None
        )
        if engine is None:
            raise PreventUpdate
        return self.run.views[engine].key, "timeline"

    # -- downloads -----------------------------------------------------------------------
    def download(
        self,
        trigger: str | None,
        tab: str | None,
        view_state: dict[str, Any] | None,
        cmp_state: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The figure as shown, rebuilt from its trace and visible range (never from client JSON)."""
        if tab == "engines" and self.run is not None:
            title = labels.engines_figure_title(self.run.totals_line())
            fig = build_figure(engines_chart(self.run), None, self.max_points, title=title)
            name = "schedscope-engines"
        elif tab == "compare":
            if not cmp_state:
                raise PreventUpdate
            found = self.store.compared(*cmp_state["pair"])
            if found is None:
                raise PreventUpdate
            joint, c, _ = found
            chart = joint.once("chart", lambda: compare_chart(c))
            fig = build_figure(chart, cmp_state.get("range"), self.max_points, title=headline(c)[0])
            name = "schedscope-compare"
        else:
            view = self.store.get((view_state or {}).get("key"))
            if view is None:
                raise PreventUpdate
            fig = build_figure(
                timeline_chart(view),
                view_state.get("range"),
                self.max_points,
                selected=view_state.get("selected"),
                title=f"{view.label}: {view.summary()}",
            )
            name = "schedscope-timeline"
        if trigger == ids.DOWNLOAD_PNG:
            return dcc.send_bytes(figure_png(fig), f"{name}.png")
        return {"content": figure_html(fig), "filename": f"{name}.html", "type": "text/html"}


def wire(value: Any) -> Any:
    """A Patch as Dash sends it (its own to_plotly_json), so Dash's encoder writes the answer in
    one orjson pass: handed the Patch object, it first walks every list of the answer in Python
    (about 0.1 s for a zoom's 750 KB of arrays). Anything else is returned as it is."""
    return value.to_plotly_json() if isinstance(value, Patch) else value


def _run_of(view: TraceView) -> str:
    """Which run a view shows (header start_time and pid), without naming its file to the browser."""
    header = view.trace.header
    return f"{header.get('start_time')}/{header.get('pid')}"


def _version(view: TraceView) -> str:
    return f"{view.key}:{view.version}"


def _empty_figure(message: str) -> dict[str, Any]:
    return {
        "data": [],
        "layout": {
            "annotations": [
                {"text": message, "showarrow": False, "font": {"size": 16}, "xref": "paper", "yref": "paper"}
            ],
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "height": 300,
        },
    }


UPLOAD_GATE_JS = """
function(contents, filename, limit) {
    // Check the size in the browser, so an oversized file is never sent to the server. The
    // words are tracer.render.labels'; a function fills each {field}, so a "$" in a name stays.
    var words = WORDS;
    var fill = function(text, fields) {
        return text.replace(/\\{(\\w+)\\}/g, function(_, key) { return fields[key]; });
    };
    if (!contents) { return [window.dash_clientside.no_update, window.dash_clientside.no_update]; }
    var bytes = Math.floor((contents.length - contents.indexOf(",") - 1) * 3 / 4);
    if (bytes > limit) {
        var mib = function(n) { return (n / 1048576).toFixed(1) + " MiB"; };
        return [null, fill(words.tooLarge, {name: filename, size: mib(bytes), limit: mib(limit)})];
    }
    return [{contents: contents, filename: filename}, fill(words.opening, {name: filename})];
}
""".replace("WORDS", labels.UPLOAD_WORDS_JS)


# What the timeline's answer is for when inputs fired together: Dash sends a zoom that comes while
# a live tick is waiting to go out as one request, and `ctx.triggered_id` then named the tick, so
# the zoom was answered as a tick (with "follow tail" on, not at all). A new trace comes first,
# then the user's zoom and selection, then the tick.
_TIMELINE_ORDER = (ids.TRACE, ids.GRAPH, ids.SELECTED, ids.TICK)


def timeline_trigger(fired: Sequence[Any]) -> str | None:
    """The input a timeline request answers, of the component ids that fired in it."""
    return next((cid for cid in _TIMELINE_ORDER if cid in fired), None)


def register(app: Dash, h: Handlers) -> None:
    from dash import ctx
    from flask import request

    @app.server.before_request
    def _page_opened() -> None:
        if request.path == "/":
            h.page_opened()

    def trig() -> Any:  # a component id, or a pattern-matching id (dict)
        return ctx.triggered_id

    @app.callback(
        Output(ids.GRAPH, "figure"),
        Output(ids.VIEW, "data"),
        Output(ids.VERSION, "data"),
        Output(ids.LIVE_STATUS, "children"),
        Input(ids.TRACE, "value"),
        Input(ids.GRAPH, "relayoutData"),
        Input(ids.SELECTED, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.VIEW, "data"),
        State(ids.FOLLOW_TAIL, "value"),
    )
    def _timeline(key, relayout, selected, _tick, state, follow_tail):  # type: ignore[no-untyped-def]
        trigger = timeline_trigger(list(ctx.triggered_prop_ids.values()))
        figure, *rest = h.timeline(trigger, key, relayout, selected, state, follow_tail)
        return (wire(figure), *rest)

    @app.callback(
        Output(ids.SELECTED, "data"),
        Input(ids.TRACE, "value"),
        Input(ids.GRAPH, "clickData"),
        Input({"type": JUMP, "step": ALL}, "n_clicks"),
        prevent_initial_call=True,
    )
    def _select(key, click, _jumps):  # type: ignore[no-untyped-def]
        return h.select(trig(), key, click, ctx.triggered[0]["value"] if ctx.triggered else None)

    @app.callback(
        Output(ids.INSPECTOR, "children"),
        Input(ids.SELECTED, "data"),
        Input(ids.VERSION, "data"),
        State(ids.TRACE, "value"),
    )
    def _inspect(selected, _version, key):  # type: ignore[no-untyped-def]
        return h.inspect(selected, key)

    @app.callback(
        Output(ids.FLAG_TABLE, "children"),
        Output(ids.FLAG_PAGE_LABEL, "children"),
        Output(ids.FLAG_PAGE, "data"),
        Input(ids.TRACE, "value"),
        Input(ids.FLAG_KINDS, "value"),
        Input(ids.FLAG_TEXT, "value"),
        Input(ids.FLAG_PREV, "n_clicks"),
        Input(ids.FLAG_NEXT, "n_clicks"),
        Input(ids.VERSION, "data"),
        State(ids.FLAG_PAGE, "data"),
    )
    def _flags(key, kinds, text, _prev, _next, _version, current):  # type: ignore[no-untyped-def]
        return h.flag_table(trig(), key, kinds, text, current)

    @app.callback(Output(ids.SUMMARY, "children"), Input(ids.TRACE, "value"), Input(ids.VERSION, "data"))
    def _summary(key, _version):  # type: ignore[no-untyped-def]
        return h.summary(key)

    app.clientside_callback(
        UPLOAD_GATE_JS,
        Output(ids.UPLOAD_GATE, "data"),
        Output(ids.UPLOAD_MSG, "children"),
        Input(ids.UPLOAD, "contents"),
        State(ids.UPLOAD, "filename"),
        State(ids.UPLOAD_LIMIT, "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.TRACE, "options"),
        Output(ids.TRACE, "value"),
        Output(ids.UPLOAD_MSG, "children", allow_duplicate=True),
        Output(ids.CMP_A, "options"),
        Output(ids.CMP_B, "options"),
        Input(ids.UPLOAD_GATE, "data"),
        prevent_initial_call=True,
    )
    def _upload(gate):  # type: ignore[no-untyped-def]
        return h.upload(gate)

    @app.callback(
        Output(ids.TICK, "disabled", allow_duplicate=True),
        Input(ids.VERSION, "data"),
        State(ids.PAUSE, "n_clicks"),
        prevent_initial_call=True,
    )
    def _ticks_done(shown, pause_clicks):  # type: ignore[no-untyped-def]
        return h.ticks_done(shown, pause_clicks)

    @app.callback(
        Output(ids.TICK, "disabled"),
        Output(ids.PAUSE, "children"),
        Input(ids.PAUSE, "n_clicks"),
        prevent_initial_call=True,
    )
    def _pause(n_clicks):  # type: ignore[no-untyped-def]
        return h.pause(n_clicks)

    @app.callback(
        Output(ids.CMP_GRAPH, "figure"),
        Output(ids.CMP_HEADLINE, "children"),
        Output(ids.CMP_TOTALS, "children"),
        Output(ids.CMP_VIEW, "data"),
        Input(ids.CMP_A, "value"),
        Input(ids.CMP_B, "value"),
        Input(ids.CMP_GRAPH, "relayoutData"),
        Input(ids.VERSION, "data"),
        Input(ids.TABS, "value"),
        State(ids.CMP_VIEW, "data"),
    )
    def _compare(key_a, key_b, relayout, _version, tab, state):  # type: ignore[no-untyped-def]
        return h.compare(trig(), tab, key_a, key_b, relayout, state)

    if h.run is not None:  # the engines page exists only with --engines

        @app.callback(
            Output(ids.ENG_GRAPH, "figure"), Input(ids.ENG_GRAPH, "relayoutData"), prevent_initial_call=True
        )
        def _engines_zoom(relayout):  # type: ignore[no-untyped-def]
            return h.engines_zoom(relayout)

        @app.callback(
            Output(ids.TRACE, "value", allow_duplicate=True),
            Output(ids.TABS, "value"),
            Input(ids.ENG_GRAPH, "clickData"),
            prevent_initial_call=True,
        )
        def _engines_open(click):  # type: ignore[no-untyped-def]
            return h.engines_open(click)

    @app.callback(
        Output(ids.DOWNLOAD, "data"),
        Input(ids.DOWNLOAD_PNG, "n_clicks"),
        Input(ids.DOWNLOAD_HTML, "n_clicks"),
        State(ids.TABS, "value"),
        State(ids.VIEW, "data"),
        State(ids.CMP_VIEW, "data"),
        prevent_initial_call=True,
    )
    def _download(_png, _html, tab, view_state, cmp_state):  # type: ignore[no-untyped-def]
        return h.download(trig(), tab, view_state, cmp_state)
