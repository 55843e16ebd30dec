"""The app factory, used by `schedscope web` and by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dash import Dash

from tracer.trace.reader import Trace
from web import layout as ui
from web.callbacks import LIVE, Handlers, register
from web.decimate import MAX_POINTS
from web.follow import FileFollower
from web.store import DEFAULT_MAX_UPLOAD, TraceStore

if TYPE_CHECKING:
    from tracer.live.attach import StreamMirror


def make_app(
    trace_a: Trace | None = None,
    trace_b: Trace | None = None,
    *,
    follow: str | Path | None = None,
    max_upload: int = DEFAULT_MAX_UPLOAD,
    max_points: int = MAX_POINTS,
    follow_interval: float = 0.25,
    attach: StreamMirror | None = None,
    sweep: dict[str, Any] | None = None,
) -> Dash:
    """A Dash app over loaded traces (A, optionally B) and/or a followed file.

    The follower thread starts here; `app.follower.stop()` ends it. `attach`: the mirror of a
    live stream that writes `follow`; its state leads the live status, and a new run's file is
    followed when the server restarts. `sweep`: a `schedscope sweep --json` document, shown
    on a Sweep page.
    """
    store = TraceStore(max_upload=max_upload)
    if trace_a is not None:
        store.add("a", f"A: {Path(trace_a.path).name}", trace_a)
    if trace_b is not None:
        store.add("b", f"B: {Path(trace_b.path).name}", trace_b)
    follower = None
    if follow is not None:

        def publish(trace: Trace, version: int) -> None:
            store.add(LIVE, f"live: {Path(trace.path).name}", trace, version=version)

        current = (lambda: attach.path) if attach is not None else None
        follower = FileFollower(follow, publish, interval=follow_interval, current_path=current)
        follower.poll()  # what is already there shows on the first page load
        follower.start()

    keys = store.trace_keys()
    options = store.options()
    if follow is not None and LIVE not in keys:  # the file has no header yet
        options.append({"label": f"live: {Path(follow).name}", "value": LIVE})
    default = LIVE if follow is not None else (keys[0] if keys else None)
    if trace_b is not None:
        pair: tuple[str | None, str | None] = ("a", "b")
    elif follow is not None and trace_a is not None:
        pair = ("a", LIVE)
    else:
        pair = (default, None)

    app = Dash(__name__, title="schedscope", update_title=None)
    app.index_string = ui.INDEX
    # Uploads travel base64-encoded in a callback request: cap it, with room for the JSON around.
    app.server.config["MAX_CONTENT_LENGTH"] = max_upload * 4 // 3 + (1 << 20)
    app.layout = ui.layout(
        options,
        default=default,
        compare_pair=pair,
        live=follow is not None,
        max_upload=max_upload,
        sweep=sweep,
    )
    handlers = Handlers(store, max_points=max_points, follower=follower, attach=attach)
    register(app, handlers)
    app.store = store  # type: ignore[attr-defined]
    app.follower = follower  # type: ignore[attr-defined]
    app.attach = attach  # type: ignore[attr-defined]
    app.handlers = handlers  # type: ignore[attr-defined]
    return app
