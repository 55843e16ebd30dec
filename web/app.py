"""The app factory, used by `schedscope web` and by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import Dash

from tracer.analysis.engines import Run
from tracer.analysis.session import Session
from tracer.opening.door import Opened, Spec, open_input
from tracer.render import labels
from tracer.trace.source import TraceSource
from tracer.trace.trace_type import Trace
from web import layout as ui
from web import plotlyjs
from web.callbacks import LIVE, Handlers, register
from web.chart import build_figure
from web.decimate import MAX_POINTS
from web.engines_view import engines_chart, totals_children
from web.follow import StoreFeed
from web.model import RunView
from web.store import DEFAULT_MAX_UPLOAD, TraceStore
from web.why_view import WhyHandlers, register_why


def make_app(
    trace_a: Trace | Session | TraceSource | None = None,
    trace_b: Trace | Session | None = None,
    *,
    follow: str | Path | TraceSource | None = None,
    strict: bool = True,
    max_upload: int = DEFAULT_MAX_UPLOAD,
    max_points: int = MAX_POINTS,
    follow_interval: float = 0.25,
    sweep: dict[str, Any] | None = None,
    engines: Run | None = None,
    opened: Opened | None = None,
) -> Dash:
    """A Dash app over traces (A, optionally B) and/or a live source.

    `opened`: what `schedscope web` opened (tracer.opening.door). Otherwise: `trace_a`, a
    loaded Trace or Session, or a `TraceSource` (the one the TUI takes): a complete file shows
    as A while it loads; a growing file or a live stream is the live trace, as is `follow` (a
    path is followed as it grows, `strict` or not). The sources start here; `app.feeds` hold
    them (`feed.stop()` ends one). `sweep`: a `schedscope sweep --json` document, shown on a
    Sweep page. `engines`: the engines of one data-parallel run, one lane each on an Engines
    page; each is also a trace of the timeline page. ValueError for two live sources.
    """
    if opened is None:
        opened = _given(trace_a, trace_b, follow, strict, follow_interval, engines)
    store = TraceStore(max_upload=max_upload)
    feeds: list[StoreFeed] = []
    # A and B: a complete file shown while it loads first, then the traces opened whole (an
    # engine run's Sessions are its lanes, not A and B).
    shown = [opened.source] if opened.source is not None else []
    ab: list[TraceSource | Session] = [*shown, *(opened.sessions if opened.run is None else [])]
    for key, item in zip(("a", "b"), ab[:2], strict=False):  # the one check allows two
        if isinstance(item, TraceSource):
            feeds.append(StoreFeed(item, store, key, f"{key.upper()}: "))
        else:
            store.add(key, f"{key.upper()}: {item.name}", item)
    run = RunView.build(opened.run) if opened.run is not None else None
    for engine_view in run.views if run is not None else []:
        store.put(engine_view)
    live = None
    if opened.live is not None:
        live = StoreFeed(opened.live, store, LIVE, labels.LIVE_PREFIX)
        feeds.append(live)

    # The dropdown names every slot, in order, whether or not its source has read anything yet.
    names = {o["value"]: o["label"] for o in store.options()}
    names.update({f.key: f.label for f in feeds if f.key not in names})
    engine_keys = [v.key for v in run.views] if run is not None else []
    options = [{"label": names[k], "value": k} for k in ("a", "b", *engine_keys, LIVE) if k in names]
    keys = [o["value"] for o in options]
    default = LIVE if live is not None else (keys[0] if keys else None)
    if len(ab) > 1:
        pair: tuple[str | None, str | None] = ("a", "b")
    elif live is not None and "a" in keys:
        pair = ("a", LIVE)
    else:
        pair = (default, None)

    app = Dash(__name__, title=labels.APP_NAME, update_title=None)
    # The page's plotly.js: the cartesian bundle, asked for from the head (web.plotlyjs).
    app.index_string = ui.INDEX.replace("<head>", "<head>" + plotlyjs.install(app), 1)
    # Uploads travel base64-encoded in a callback request: cap it, with room for the JSON around.
    app.server.config["MAX_CONTENT_LENGTH"] = max_upload * 4 // 3 + (1 << 20)
    app.layout = ui.layout(
        options,
        default=default,
        compare_pair=pair,
        live=live is not None,
        max_upload=max_upload,
        sweep=sweep,
        engines=None if run is None else (engines_figure(run, max_points), totals_children(run)),
    )
    handlers = Handlers(store, max_points=max_points, feeds=feeds, run=run)
    for feed in feeds:
        feed.on_view = handlers.prepare
    register(app, handlers)
    register_why(
        app, WhyHandlers(store, max_points=max_points), trace=ui.TRACE, version=ui.VERSION, graph=ui.GRAPH
    )
    for feed in feeds:
        feed.start()
    app.store = store  # type: ignore[attr-defined]
    app.feeds = feeds  # type: ignore[attr-defined]
    app.handlers = handlers  # type: ignore[attr-defined]
    return app


def _given(
    trace_a: Trace | Session | TraceSource | None,
    trace_b: Trace | Session | None,
    follow: str | Path | TraceSource | None,
    strict: bool,
    follow_interval: float,
    engines: Run | None,
) -> Opened:
    """What make_app's arguments name, opened as `schedscope web`'s inputs are: the sources
    (a path to follow made one), checked by the one check (no two live sources); traces already
    loaded become Sessions (a Session given is kept, with what it has computed)."""
    made = tuple(s for s in (trace_a, follow) if isinstance(s, TraceSource))
    path = None if isinstance(follow, TraceSource) else follow
    opened = Opened()
    if made or path is not None:
        pace = {"interval": follow_interval, "poll": follow_interval}
        opened = open_input(
            Spec(
                sources=made, follow=path, strict=strict, live_beside=True, viewer="web", source_options=pace
            )
        )
    loaded = [Session.of(t) for t in (trace_a, trace_b) if t is not None and not isinstance(t, TraceSource)]
    if engines is not None:
        opened.run = engines
    else:
        opened.sessions = loaded
    return opened


def engines_figure(run: RunView, max_points: int = MAX_POINTS) -> Any:
    return build_figure(engines_chart(run), None, max_points, uirevision="engines")
