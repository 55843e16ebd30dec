"""Page layout: the timeline tab (graph, step inspector, flag table, live controls,
upload and downloads) and the compare tab. Component ids live here, once."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from tracer.analysis import flags as flag_registry  # read when laid out: a new kind needs no edit here
from tracer.render import labels
from web.why_view import why_section

# Component ids.
TRACE = "trace-select"
GRAPH = "timeline"
VIEW = "view-state"
SELECTED = "selected"
VERSION = "data-version"
TICK = "tick"
PAUSE = "pause"
FOLLOW_TAIL = "follow-tail"
LIVE_STATUS = "live-status"
SUMMARY = "summary"
INSPECTOR = "inspector"
FLAG_KINDS = "flag-kinds"
FLAG_TEXT = "flag-text"
FLAG_TABLE = "flag-table"
FLAG_PREV = "flag-prev"
FLAG_NEXT = "flag-next"
FLAG_PAGE = "flag-page"
FLAG_PAGE_LABEL = "flag-page-label"
UPLOAD = "upload"
UPLOAD_GATE = "upload-gate"
UPLOAD_LIMIT = "upload-limit"
UPLOAD_MSG = "upload-msg"
DOWNLOAD_PNG = "download-png"
DOWNLOAD_HTML = "download-html"
DOWNLOAD = "download"
TABS = "tabs"
CMP_A = "compare-a"
CMP_B = "compare-b"
CMP_GRAPH = "compare-graph"
CMP_HEADLINE = "compare-headline"
CMP_TOTALS = "compare-totals"
CMP_VIEW = "compare-view"
ENG_GRAPH = "engines-graph"
ENG_TOTALS = "engines-totals"

TICK_MS = 300  # with the follower's 0.25 s poll, new steps show within a second

CSS = """
body { font-family: "Liberation Sans", "DejaVu Sans", Arial, sans-serif; margin: 0; color: #222; }
header { padding: 8px 16px; background: #1f2a38; color: #fff; display: flex; gap: 16px;
         align-items: baseline; }
header h1 { font-size: 18px; margin: 0; }
.bar { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 8px 16px; }
.bar .dropdown { min-width: 320px; }
#summary { padding: 0 16px; font-size: 13px; color: #333; }
.upload { border: 1px dashed #888; border-radius: 4px; padding: 6px 12px; cursor: pointer; font-size: 13px; }
.error { color: #b00020; font-weight: bold; }
.ok { color: #2e7d32; }
.muted { color: #666; font-size: 12px; }
.columns { display: grid; grid-template-columns: minmax(380px, 2fr) 3fr; gap: 16px; padding: 0 16px 24px; }
#inspector pre { background: #f6f6f6; padding: 8px; font-size: 13px; white-space: pre-wrap; }
table.requests, table.totals, table.flags { border-collapse: collapse; font-size: 13px; }
table.flags td, table.flags th { border-bottom: 1px solid #ddd; padding: 3px 6px; text-align: left;
  vertical-align: top; }
table.flags td.message { font-size: 12px; }
td.sev-error { color: #b00020; } td.sev-warning { color: #c75000; } td.sev-info { color: #00838f; }
table.requests td, table.requests th, table.totals td, table.totals th {
  border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }
table.requests td:nth-child(-n+2), table.totals td:first-child { text-align: left; }
.sev-error b { color: #b00020; } .sev-warning b { color: #c75000; } .sev-info b { color: #00838f; }
td.better { color: #2e7d32; font-weight: bold; } td.worse { color: #b00020; font-weight: bold; }
#compare-headline p { margin: 4px 0; font-size: 15px; }
.compare-body { padding: 0 16px 24px; }
"""

# Dash serves @babel/polyfill 7.12 (core-js 2) first among its scripts. It swaps the browser's
# own String.prototype.trim, parseInt and parseFloat for JavaScript ones, because core-js 2 still
# counts U+180E as whitespace (Unicode 6.3 dropped it, so every current browser "fails" its
# check). plotly.js calls them per point and per colour: about a tenth of the browser's time in
# a zoom of the 200k-step timeline (docs/performance-history.md). The page keeps the native ones and puts
# them back once the scripts have run, before the app starts.
_NATIVE_JS = ("String.prototype", "trim"), ("String.prototype", "trimStart"), ("String.prototype", "trimEnd")
_NATIVE_JS += (
    ("window", "parseInt"),
    ("window", "parseFloat"),
    ("Number", "parseInt"),
    ("Number", "parseFloat"),
)
_KEPT = ",".join(f"[{o},'{k}',{o}.{k}]" for o, k in _NATIVE_JS)
KEEP_NATIVE = f"<script>window.__ssNative=[{_KEPT}];</script>"
RESTORE_NATIVE = "<script>window.__ssNative.forEach(function(n){if(n[2]){n[0][n[1]]=n[2];}});</script>"

INDEX = (
    """<!DOCTYPE html>
<html>
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>"""
    + CSS
    + """</style></head>
<body>{%app_entry%}<footer>{%config%}"""
    + KEEP_NATIVE
    + "{%scripts%}"
    + RESTORE_NATIVE
    + """{%renderer%}</footer></body>
</html>"""
)


def _timeline_tab(options: list[dict[str, Any]], default: str | None, live: bool, max_upload: int) -> dcc.Tab:
    controls = [
        dcc.Dropdown(id=TRACE, options=options, value=default, clearable=False, className="dropdown"),
        dcc.Upload(
            id=UPLOAD,
            children=html.Div([labels.UPLOAD_PROMPT, html.A(labels.UPLOAD_CHOOSE)]),
            className="upload",
            multiple=False,
        ),
        html.Span(id=UPLOAD_MSG),
    ]
    if live:
        controls += [
            html.Button(labels.PAUSE, id=PAUSE, title=labels.PAUSE_TIP),
            dcc.Checklist(
                id=FOLLOW_TAIL, options=[{"label": labels.FOLLOW_TAIL, "value": "on"}], value=["on"]
            ),
            html.Span(id=LIVE_STATUS, className="muted"),
        ]
    else:  # the callbacks name these ids: keep them, hidden
        controls += [
            html.Button(labels.PAUSE, id=PAUSE, style={"display": "none"}),
            dcc.Checklist(id=FOLLOW_TAIL, options=[], value=[], style={"display": "none"}),
            html.Span(id=LIVE_STATUS, style={"display": "none"}),
        ]
    flags = html.Div(
        [
            html.H4(labels.FLAGS),
            html.Div(
                [
                    dcc.Dropdown(
                        id=FLAG_KINDS,
                        options=[{"label": k, "value": k} for k in flag_registry.KINDS],
                        multi=True,
                        placeholder=labels.ALL_KINDS,
                        className="dropdown",
                    ),
                    dcc.Input(
                        id=FLAG_TEXT, type="text", placeholder=labels.FILTER_PLACEHOLDER, debounce=True
                    ),
                ],
                className="bar",
                style={"padding": "0 0 8px 0"},
            ),
            html.Div(id=FLAG_TABLE),
            html.Div(
                [
                    html.Button(labels.PREVIOUS_PAGE, id=FLAG_PREV),
                    html.Span(id=FLAG_PAGE_LABEL, className="muted"),
                    html.Button(labels.NEXT_PAGE, id=FLAG_NEXT),
                    html.Span(labels.JUMP_HINT, className="muted"),
                ],
                className="bar",
                style={"padding": "6px 0"},
            ),
            dcc.Store(id=FLAG_PAGE, data=0),
        ]
    )
    return dcc.Tab(
        label=labels.TIMELINE_TAB,
        value="timeline",
        children=[
            html.Div(controls, className="bar"),
            html.Div(id=SUMMARY),
            dcc.Graph(
                id=GRAPH,
                # The figure gives the whole run as an explicit x range (web.callbacks), which a
                # followed or still-loading trace then moves: plotly.js's "reset" would go back to
                # the first one. A double-click and the modebar autoscale instead.
                config={
                    "displaylogo": False,
                    "scrollZoom": True,
                    "doubleClick": "autosize",
                    "modeBarButtonsToRemove": ["resetScale2d"],
                },
                style={"height": "1250px"},
            ),
            *why_section(),  # waiting by reason, the request Gantt and its why (web.why_view)
            html.Div([html.Div(id=INSPECTOR), flags], className="columns"),
            dcc.Store(id=UPLOAD_LIMIT, data=max_upload),
            dcc.Store(id=UPLOAD_GATE),
        ],
    )


def _compare_tab(options: list[dict[str, Any]], a: str | None, b: str | None) -> dcc.Tab:
    return dcc.Tab(
        label=labels.COMPARE_TAB,
        value="compare",
        id="compare-tab",
        children=[
            html.Div(
                [
                    html.Span("A"),
                    dcc.Dropdown(id=CMP_A, options=options, value=a, className="dropdown", clearable=False),
                    html.Span("B"),
                    dcc.Dropdown(id=CMP_B, options=options, value=b, className="dropdown", clearable=False),
                ],
                className="bar",
            ),
            html.Div(
                [
                    html.Div(id=CMP_HEADLINE),
                    html.Div(id=CMP_TOTALS),
                    dcc.Graph(id=CMP_GRAPH, config={"displaylogo": False}, style={"height": "1050px"}),
                ],
                className="compare-body",
            ),
        ],
    )


def _engines_tab(figure: Any, totals: list[Any]) -> dcc.Tab:
    return dcc.Tab(
        label=labels.ENGINES_TAB,
        value="engines",
        id="engines-tab",
        children=[
            html.Div(totals, id=ENG_TOTALS, className="bar"),
            html.Div(
                labels.ENGINES_NOTE,
                className="bar muted",
            ),
            dcc.Graph(
                id=ENG_GRAPH,
                figure=figure,
                config={"displaylogo": False, "scrollZoom": True},
                style={"height": f"{figure.layout.height}px"},
            ),
        ],
    )


def layout(
    options: list[dict[str, Any]],
    *,
    default: str | None,
    compare_pair: tuple[str | None, str | None],
    live: bool,
    max_upload: int,
    sweep: dict[str, Any] | None = None,
    engines: tuple[Any, list[Any]] | None = None,
) -> html.Div:
    """`live`: show the live controls; `engines`: (figure, totals) of a run's engines, shown
    first on their own tab."""
    tabs = [_timeline_tab(options, default, live, max_upload), _compare_tab(options, *compare_pair)]
    if engines is not None:
        tabs.insert(0, _engines_tab(*engines))
    if sweep is not None:
        from web.sweep_figure import sweep_tab

        tabs.append(sweep_tab(sweep))
    return html.Div(
        [
            html.Header(
                [
                    html.H1(labels.APP_NAME),
                    html.Span(labels.TAGLINE),
                    html.Span(
                        [
                            labels.DOWNLOAD,
                            html.Button(labels.PNG, id=DOWNLOAD_PNG, title=labels.PNG_TIP),
                            html.Button(labels.HTML, id=DOWNLOAD_HTML, title=labels.HTML_TIP),
                        ],
                        style={"marginLeft": "auto"},
                    ),
                    dcc.Download(id=DOWNLOAD),
                ]
            ),
            dcc.Tabs(
                id=TABS,
                value="engines" if engines is not None else "timeline",
                children=tabs,
            ),
            dcc.Store(id=VIEW),
            dcc.Store(id=CMP_VIEW),
            dcc.Store(id=SELECTED),
            dcc.Store(id=VERSION),
            # Off until the first figure is shown (web.callbacks.Handlers.ticks_done turns it on):
            # a tick's request while the first figure is on its way had it sent, and drawn, again.
            dcc.Interval(id=TICK, interval=TICK_MS, disabled=True),
        ]
    )
