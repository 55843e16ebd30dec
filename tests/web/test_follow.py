"""The web app over a tracer.trace.source.TraceSource (web/follow.py's StoreFeed): a growing
file, a bad one, --lenient, a complete file shown while it loads, and a live stream."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import pytest

from tests.stream_support import records, wait_for
from tracer.trace.reader import load
from tracer.trace.source import Phase, TraceSource
from web.app import make_app
from web.callbacks import LIVE

from .helpers import ADDITIVE, lines, tiled_lines


def live_app(path: Path, **options: Any) -> Any:
    return make_app(TraceSource.follow(path, poll=0.02, interval=0.02, **options))


def rows(app: Any, key: str = LIVE) -> int | None:
    view = app.store.get(key)
    return None if view is None else len(view)


def test_follows_a_growing_file_step_by_step(tmp_path: Path) -> None:
    src = lines()
    path = tmp_path / "live.jsonl"
    app = live_app(path)
    try:
        wait_for(lambda: "waiting for" in app.handlers.live_status())
        path.write_bytes(src[0])
        wait_for(lambda: rows(app) == 0)  # header only: an empty trace to show
        with path.open("ab") as out:
            out.write(src[1] + src[2][:50])  # a step and a half: the torn half waits
        wait_for(lambda: rows(app) == 1)
        with path.open("ab") as out:
            out.write(src[2][50:])
        wait_for(lambda: rows(app) == 2)
        version = app.store.get(LIVE).version
        time.sleep(0.2)
        assert app.store.get(LIVE).version == version  # nothing new, nothing published
        path.write_bytes(src[0] + src[1])  # rewritten shorter: start over
        wait_for(lambda: rows(app) == 1 and app.store.get(LIVE).version > version)
        assert app.handlers.live_status() == "following live.jsonl: 1 steps"
    finally:
        app.feeds[0].stop()


def test_a_bad_header_is_reported_not_raised_and_a_rewrite_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"kind":"step","step":1}\n')
    app = live_app(path)
    try:
        wait_for(lambda: "cannot read" in app.handlers.live_status())
        assert "bad.jsonl:1: field 'kind': the first record must be a header" in app.handlers.live_status()
        path.write_bytes(b"".join(lines()[:2]))  # rewritten as a trace: it is followed
        wait_for(lambda: rows(app) == 1)
    finally:
        app.feeds[0].stop()


def test_a_growing_gzip_file_is_followed(tmp_path: Path) -> None:
    """gzip is told by its magic bytes (no .gz suffix here); appended members decompress as they come."""
    src = lines()
    path = tmp_path / "live.trace"
    path.write_bytes(gzip.compress(b"".join(src[:3])))
    app = live_app(path)
    try:
        wait_for(lambda: rows(app) == 2)
        with path.open("ab") as out:
            out.write(gzip.compress(b"".join(src[3:])))
        wait_for(lambda: rows(app) == 7)
    finally:
        app.feeds[0].stop()


def test_follow_honours_lenient(tmp_path: Path) -> None:
    src = lines()
    path = tmp_path / "live.jsonl"
    path.write_bytes(src[0] + src[1] + b'{"kind":"step","step":2}\n' + src[3])
    strict, lenient = live_app(path), live_app(path, strict=False)
    try:
        wait_for(lambda: rows(lenient) == 2)
        assert len(lenient.store.get(LIVE).trace.problems) == 1
        wait_for(lambda: "cannot read" in strict.handlers.live_status())
        assert "live.jsonl:3: field 't': missing" in strict.handlers.live_status()
        assert rows(strict) is None
    finally:
        strict.feeds[0].stop()
        lenient.feeds[0].stop()


def test_a_complete_file_shows_as_a_while_it_loads() -> None:
    app = make_app(TraceSource.file(ADDITIVE))
    try:
        assert app.layout is not None
        wait_for(lambda: rows(app, "a") == 7)
        assert app.store.get("a").label == "A: dflash_k7_additive.jsonl"
        wait_for(lambda: app.handlers.live_status() == "")  # complete: nothing to say
    finally:
        app.feeds[0].stop()


def test_ticks_start_with_the_first_figure_and_stop_once_a_complete_file_is_shown(tmp_path: Path) -> None:
    """The page's ticks start off, and the first figure shown turns them on (a tick asked while
    the first figure was on its way had it sent and drawn again). A tick's request supersedes a
    zoom's (Dash then drops the zoom): a complete file stops them, but only after the page shows
    its last snapshot; a followed file never does; a paused page stays paused."""
    from dash import no_update

    from web import layout as ids

    app = make_app(TraceSource.file(ADDITIVE))
    try:
        assert app.layout[ids.TICK].disabled is True
        wait_for(lambda: app.feeds[0].source.state.phase.value == "complete" and rows(app, "a") == 7)
        h, view = app.handlers, app.store.get("a")
        assert h.ticks_done(f"a:{view.version}") is True
        assert h.ticks_done(f"a:{view.version - 1}") is False  # an older snapshot on the page: tick on
        assert h.ticks_done("") is False  # the page shows "nothing yet"
        assert h.ticks_done(f"a:{view.version - 1}", pause_clicks=1) is no_update  # paused
        assert h.ticks_done(f"a:{view.version - 1}", pause_clicks=2) is False  # resumed
    finally:
        app.feeds[0].stop()
    path = tmp_path / "growing.jsonl"
    path.write_bytes(b"".join(lines()[:4]))
    followed = live_app(path)
    try:
        wait_for(lambda: followed.store.get(LIVE) is not None)
        view = followed.store.get(LIVE)
        assert followed.handlers.ticks_done(f"{LIVE}:{view.version}") is False
    finally:
        followed.feeds[0].stop()
    assert make_app(load(ADDITIVE)).handlers.ticks_done("a:0") is no_update  # a loaded trace: no ticks


def test_attach_status_leads_the_live_status_and_a_new_run_redraws(tmp_path: Path) -> None:
    """make_app(stream source) over the real stream server: the stream's state is shown, and a
    restart's new run (saved to its own file) replaces the timeline with a new figure, not a patch."""
    import orjson

    from tracer.live.stream import StreamHub, StreamServer
    from web import layout as ids

    src = lines()
    head = orjson.loads(src[0])
    restarted = orjson.dumps({**head, "pid": head["pid"] + 1, "start_time": head["start_time"] + 60}) + b"\n"
    hub_a = StreamHub()
    hub_a.publish(records(src[:4]))
    server_a = StreamServer(hub_a, "127.0.0.1", 0, heartbeat=0.1)
    port = server_a.address[1]
    servers = [server_a]
    source = TraceSource.stream(
        server_a.url, save=tmp_path / "live.jsonl", timeout=0.4, backoff=(0.01, 0.05), interval=0.05
    )
    app = make_app(source)
    h = app.handlers  # type: ignore[attr-defined]
    store = app.store  # type: ignore[attr-defined]

    def shown(label: str, n: int) -> bool:
        view = store.get(LIVE)
        return (
            source.state.phase.value == "idle" and view is not None and view.label == label and len(view) == n
        )

    try:
        # The page shows the feed's state, which the source hands over just after its own
        # changes: wait for what the page would show, not only for the source.
        wait_for(lambda: shown("live: live.jsonl", 3) and h.live_status().startswith("idle since "))
        fig, state, _, status = h.timeline(None, LIVE, None, None, None, ["on"])
        assert isinstance(fig, dict) and fig["data"] and state["rows"] == 3
        assert status.startswith("idle since ") and status.endswith("(last step 3)")
        server_a.close()
        hub_b = StreamHub()
        hub_b.publish(records([restarted, *src[1:6]]))
        servers.append(StreamServer(hub_b, "127.0.0.1", port, heartbeat=0.1))
        wait_for(lambda: shown("live: live.1.jsonl", 5))
        fig, state2, _, status = h.timeline(ids.TICK, LIVE, None, None, state, ["on"])
        assert isinstance(fig, dict) and fig["data"] and state2["rows"] == 5 and state2["run"] != state["run"]
        assert "new run 2 (the server restarted) → live.1.jsonl" in status
    finally:
        source.close()
        for server in servers:
            server.close()


def test_a_stream_with_a_wrong_token_shows_unauthorised() -> None:
    from tracer.live.stream import StreamHub, StreamServer

    hub = StreamHub()
    hub.publish(records(lines()[:3]))
    server = StreamServer(hub, "127.0.0.1", 0, token="s3cret", heartbeat=0.1)
    source = TraceSource.stream(server.url, token="wrong", timeout=0.4, backoff=(0.01, 0.05))
    app = make_app(source)
    try:
        assert source.join(10)
        fig, state, _, status = app.handlers.timeline(None, LIVE, None, None, None, ["on"])
        assert status.startswith("unauthorised: HTTP 401") and "unauthorised: HTTP 401" in str(fig)
        assert "header" not in status and state is None
    finally:
        source.close()
        server.close()


def test_the_page_holds_a_loading_file_until_its_first_figure_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking for the page holds a source still reading a complete file (its parse would take
    the GIL and a core from serving and drawing the first figure); the first figure shown
    (ticks_done, as the page reports it) releases it, and later pages hold nothing."""
    import tracer.trace.source

    monkeypatch.setattr(tracer.trace.source, "CHUNK", 1 << 20)
    monkeypatch.setenv("SCHEDSCOPE_SIDECAR", "off")
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(tiled_lines(12_000)))
    source = TraceSource.file(path, interval=0.0)
    source.hold(0.5)  # long enough for the page's request below to come while the file loads
    app = make_app(source)
    try:
        assert app.server.test_client().get("/").status_code == 200
        wait_for(lambda: app.store.get("a") is not None)  # type: ignore[attr-defined]
        first = app.store.get("a")  # type: ignore[attr-defined]
        time.sleep(1.0)  # past the 0.5 s: the page's own hold (FIRST_FIGURE_HOLD) keeps it
        assert source.held
        assert source.state.phase is Phase.LOADING and app.store.get("a") is first  # type: ignore[attr-defined]
        app.handlers.ticks_done(f"a:{first.version}")  # type: ignore[attr-defined]
        assert not source.held and source.join(30) and len(app.store.get("a")) == 12_000  # type: ignore[attr-defined]
        app.server.test_client().get("/")
        assert not source.held
    finally:
        for feed in app.feeds:  # type: ignore[attr-defined]
            feed.stop()


def test_the_web_app_keeps_the_sessions_it_is_given_and_refuses_two_live_sources(tmp_path: Path) -> None:
    """make_app shows the Sessions the door opened (nothing computed again) and runs the door's
    one check: a live source and a file to follow are two live sources."""
    from tracer.opening.door import Spec, open_input

    a, b = open_input(Spec(traces=(ADDITIVE, ADDITIVE))).pair
    report = a.report
    app = make_app(a, b)
    assert app.store.get("a").session is a and app.store.get("a").report is report  # type: ignore[attr-defined]
    assert app.store.get("b").session is b  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="not both"):
        make_app(TraceSource.follow(tmp_path / "x.jsonl"), follow=tmp_path / "y.jsonl")
