"""Callbacks as plain functions (Handlers), without a browser."""

from __future__ import annotations

import base64
import gzip
import io
import time
from contextlib import redirect_stdout
from typing import Any

import plotly.graph_objects as go
import pytest
from dash import Patch, no_update
from dash.exceptions import PreventUpdate

from tracer.cli import main
from tracer.render.step import arithmetic
from web import layout as ids
from web.callbacks import Handlers, timeline_trigger
from web.decimate import parse_xrange
from web.flagtable import JUMP
from web.store import TraceStore

from .helpers import ADDITIVE, SEPARATE, sample, tiled


def _ops(patch: Patch) -> list[dict[str, Any]]:
    return patch.to_plotly_json()["operations"]


def _only_data(patch: Patch) -> bool:
    """The patch changes trace arrays, and the data revision that tells plotly.js so (web.chart)."""
    other = [op["location"] for op in _ops(patch) if op["location"][0] != "data"]
    return other == [["layout", "datarevision"]]


def _data_url(data: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(data).decode()


@pytest.fixture
def h() -> Handlers:
    store = TraceStore(max_upload=1 << 20)
    store.add("a", "A: additive", sample("dflash_k7_additive.jsonl"))
    store.add("b", "B: separate", sample("dflash_k7_separate.jsonl"))
    return Handlers(store)


def test_parse_xrange() -> None:
    assert parse_xrange({"xaxis3.range[0]": 2, "xaxis3.range[1]": 5.5}) == (True, [2.0, 5.5])
    assert parse_xrange({"xaxis.range": [1, 3]}) == (True, [1.0, 3.0])
    assert parse_xrange({"xaxis2.autorange": True}) == (True, None)
    assert parse_xrange({"yaxis.range[0]": 0, "yaxis.range[1]": 1}) == (False, None)
    assert parse_xrange(None) == (False, None)


def test_timeline_first_render_then_zoom_patches(h: Handlers) -> None:
    fig, state, version, _ = h.timeline(None, "a", None, None, None, None)
    assert isinstance(fig, dict) and state["key"] == "a" and version == "a:0"
    assert go.Figure(fig).data[0].name == "target used"  # plain JSON types, valid for plotly
    patch, state2, version2, _ = h.timeline(
        ids.GRAPH, "a", {"xaxis.range[0]": 1.5, "xaxis.range[1]": 3.5}, None, state, None
    )
    assert version2 is no_update  # the same data: what follows the version (inspector, flags, ...) stays
    assert state2["sent"] == 4 and state2["rows"] == 7  # steps 1..4 (one step of margin each side)
    assert isinstance(patch, Patch) and state2["range"] == [1.5, 3.5]
    assert _only_data(patch)
    with pytest.raises(PreventUpdate):
        h.timeline(ids.GRAPH, "a", {"dragmode": "pan"}, None, state, None)


def test_a_tick_that_superseded_a_zoom_zooms(h: Handlers) -> None:
    """Dash drops an answer once a newer request for its output is out: a tick asked while the
    zoom's answer was on its way carries the zoom, with the tail followed or not; a jump or a
    stale range from before the figure is never taken for one."""
    zoom = {"xaxis.range[0]": 1.5, "xaxis.range[1]": 3.5}
    _, state, *_ = h.timeline(None, "a", None, None, None, None)
    h.timeline(ids.GRAPH, "a", zoom, None, state, None)  # its answer never lands: the page keeps `state`
    patch, zoomed, *_ = h.timeline(ids.TICK, "a", zoom, None, state, None)
    assert isinstance(patch, Patch) and zoomed["range"] == [1.5, 3.5] and zoomed["sent"] == 4
    again = h.timeline(ids.TICK, "a", zoom, None, zoomed, None)
    assert again[0] is no_update  # the zoom is in: an ordinary tick, nothing new
    jumped = h.timeline(ids.SELECTED, "a", zoom, {"key": "a", "step": 6}, zoomed, None)[1]
    assert jumped["range"] != [1.5, 3.5]
    assert h.timeline(ids.TICK, "a", zoom, None, jumped, None)[0] is no_update  # the jump stays
    _, fresh, *_ = h.timeline(ids.TRACE, "a", zoom, None, None, None)  # a new figure; the old range held
    assert h.timeline(ids.TICK, "a", zoom, None, fresh, None)[0] is no_update
    # Following the tail too: the zoom the tick superseded is drawn (it had been lost).
    patch, tailed, *_ = h.timeline(ids.TICK, "a", zoom, None, state, ["on"])
    assert isinstance(patch, Patch) and tailed["range"] == [1.5, 3.5]


def test_a_zoom_sent_with_a_tick_is_answered_as_the_zoom(h: Handlers) -> None:
    """Dash sends inputs that fired before its request went out as one request: a zoom beside a
    waiting live tick is a zoom, with "follow tail" on too (it had been answered as a tick, and
    with the tail followed, not at all)."""
    assert timeline_trigger([ids.TICK, ids.GRAPH]) == ids.GRAPH
    assert timeline_trigger([ids.GRAPH, ids.TRACE]) == ids.TRACE
    assert timeline_trigger([ids.TICK, ids.SELECTED]) == ids.SELECTED
    assert timeline_trigger([ids.TICK]) == ids.TICK and timeline_trigger([]) is None
    zoom = {"xaxis.range[0]": 1.5, "xaxis.range[1]": 3.5}
    _, state, *_ = h.timeline(None, "a", None, None, None, None)
    patch, zoomed, *_ = h.timeline(timeline_trigger([ids.TICK, ids.GRAPH]), "a", zoom, None, state, ["on"])
    assert isinstance(patch, Patch) and zoomed["range"] == [1.5, 3.5]


def test_a_page_that_ticks_before_its_first_figure_arrived_gets_the_same_figure(
    h: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dash drops an answer once a newer request for the same output is out: ticks asked
    while the first figure was on its way must not build it again (a big trace never drew)."""
    import web.callbacks

    built: list[str] = []
    real = web.callbacks.figure_dict
    monkeypatch.setattr(web.callbacks, "figure_dict", lambda *a, **k: built.append("x") or real(*a, **k))
    first, state, *_ = h.timeline(None, "a", None, None, None, None)
    for _ in range(3):  # the browser never got `state`: each tick asks for the whole figure again
        again, again_state, *_ = h.timeline(ids.TICK, "a", None, None, None, None)
        assert again is first and again_state == state
    assert built == ["x"]
    h.store.add("a", "A: separate now", sample("dflash_k7_separate.jsonl"))  # a new version
    newer, *_ = h.timeline(ids.TICK, "a", None, None, None, None)
    assert newer is not first and built == ["x", "x"]


def test_selecting_a_step_draws_its_line_and_jumps_when_off_screen(h: Handlers) -> None:
    _, state, *_ = h.timeline(None, "a", None, None, None, None)
    patch, *_ = h.timeline(ids.SELECTED, "a", None, {"key": "a", "step": 3}, state, None)
    shapes = next(op for op in _ops(patch) if op["location"] == ["layout", "shapes"])
    assert shapes["params"]["value"][0]["x0"] == 3
    zoomed = {**state, "range": [1.0, 2.0]}
    patch, new_state, *_ = h.timeline(ids.SELECTED, "a", None, {"key": "a", "step": 6}, zoomed, None)
    assert new_state["range"] == [5.5, 6.5]
    assert any(op["location"] == ["layout", "xaxis", "range"] for op in _ops(patch))


def test_select_from_click_and_table(h: Handlers) -> None:
    assert h.select(ids.GRAPH, "a", {"points": [{"x": 2, "y": 8185}]}, None) == {"key": "a", "step": 2}
    jump = {"type": JUMP, "step": 9}
    assert h.select(jump, "a", None, 1) == {"key": "a", "step": 9}
    with pytest.raises(PreventUpdate):  # buttons redrawn, not clicked
        h.select(jump, "a", None, None)
    assert h.select(ids.TRACE, "a", None, None) is None


def _text(component: Any) -> str:
    if isinstance(component, (list, tuple)):
        return " ".join(_text(c) for c in component)
    if hasattr(component, "children"):
        return _text(component.children)
    return "" if component is None else str(component)


def test_inspector_shows_tracer_arithmetic_requests_and_flags(h: Handlers) -> None:
    text = _text(h.inspect({"key": "a", "step": 1}, "a"))
    view = h.store.get("a")
    for line in arithmetic(view.trace, 0, view.report.analysis):
        assert line in text
    assert "input 8192 = 8185 target + 1×7 reserved draft slots" in text
    assert "additive-double-reservation" in text and "long" in text and "32768" in text
    assert "Click a step" in _text(h.inspect(None, "a"))
    assert "no step 99" in _text(h.inspect({"key": "a", "step": 99}, "a"))


def _steps_in(table: Any) -> list[str]:
    return [row.children[0].children.children for row in table.children[1].children]


def test_flag_table_filters_and_pages(h: Handlers) -> None:
    table, label, current = h.flag_table(None, "a", None, None, 0)
    assert _steps_in(table) == ["1", "2", "3", "4"] and label == "page 1 of 1 (4 flags)" and current == 0
    assert "no flag matches" in _text(h.flag_table(ids.FLAG_KINDS, "a", ["query-overflow"], None, 0)[0])
    assert _steps_in(h.flag_table(ids.FLAG_TEXT, "a", None, "3", 0)[0]) == ["3"]
    assert _text(h.flag_table(ids.TRACE, "b", None, None, 0)[0]) == "no flags"
    h.store.add("big", "big", tiled(200))  # 4 of every 7 steps flagged: 116 flags, 10 pages
    _, label, current = h.flag_table(ids.FLAG_NEXT, "big", None, None, 8)
    assert (label, current) == ("page 10 of 10 (116 flags)", 9)
    assert h.flag_table(ids.FLAG_NEXT, "big", None, None, 9)[2] == 9  # clamped
    assert h.flag_table(ids.FLAG_PREV, "big", None, None, 9)[2] == 8
    assert h.flag_table(ids.FLAG_KINDS, "big", None, None, 9)[2] == 0  # a new filter starts over


def test_upload_opens_plain_and_gzip_traces(h: Handlers) -> None:
    options, value, msg, *_ = h.upload({"contents": _data_url(ADDITIVE.read_bytes()), "filename": "x.jsonl"})
    assert value == "upload-1" and any(o["value"] == "upload-1" for o in options) and "7 steps" in _text(msg)
    _, value, *_ = h.upload({"contents": _data_url(gzip.compress(SEPARATE.read_bytes())), "filename": "y.gz"})
    assert h.store.get(value) is not None and len(h.store.get(value)) == 6


def test_upload_opens_a_zstd_trace(h: Handlers) -> None:
    import zstandard

    packed = zstandard.ZstdCompressor().compress(SEPARATE.read_bytes())
    _, value, msg, *_ = h.upload({"contents": _data_url(packed), "filename": "y.jsonl"})  # no .zst
    assert h.store.get(value) is not None and len(h.store.get(value)) == 6 and "6 steps" in _text(msg)


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        (_data_url(b"import os; os.system('x')\n"), "not a JSON record"),
        (_data_url(b'{"kind":"step","step":1,"t":0}\n'), "the first record must be a header"),
        (_data_url(b"\x80\x04\x95pickle"), "not a schedscope trace"),
        ("data:text/plain;base64,@@@", "not valid base64"),
        ("/etc/passwd", "not a file upload"),
        (_data_url(b"x" * (2 << 20)), "larger than the upload limit of 1 MiB"),
    ],
)
def test_bad_uploads_say_what_is_wrong(h: Handlers, contents: str, message: str) -> None:
    options, value, msg, *_ = h.upload({"contents": contents, "filename": "bad.jsonl"})
    assert options is no_update and value is no_update
    assert "Could not open the upload" in _text(msg) and message in _text(msg)


def test_only_the_newest_uploads_are_kept(h: Handlers) -> None:
    for _ in range(6):
        h.upload({"contents": _data_url(ADDITIVE.read_bytes()), "filename": "x.jsonl"})
    assert sorted(k for k in h.store.trace_keys() if k.startswith("upload-")) == [
        f"upload-{i}" for i in (3, 4, 5, 6)
    ]


def test_live_tick_extends_then_re_decimates(h: Handlers) -> None:
    h.store.add("live", "live", tiled(20), version=1)
    _, state, *_ = h.timeline(ids.TRACE, "live", None, None, None, ["on"])
    assert h.timeline(ids.TICK, "live", None, None, state, ["on"])[0] is no_update  # nothing new
    h.store.add("live", "live", tiled(25), version=2)
    patch, state, version, _ = h.timeline(ids.TICK, "live", None, None, state, ["on"])
    ops = _ops(patch)
    assert {op["operation"] for op in ops if op["location"][-1] in ("x", "y")} == {"Extend"}
    assert ops[0]["params"]["value"] == [21, 22, 23, 24, 25]
    assert state["rows"] == 25 and version == "live:2"
    # Zoomed in with follow-tail: the window slides to the newest steps.
    state = {**state, "range": [5.0, 15.0]}
    h.store.add("live", "live", tiled(5_000), version=3)
    patch, state, *_ = h.timeline(ids.TICK, "live", None, None, state, ["on"])
    assert state["range"] == [4_990.5, 5_000.5]
    assert any(op["location"] == ["layout", "xaxis", "range"] for op in _ops(patch))
    # Past the point budget the arrays are re-decimated, leaving room for later ticks ...
    h.store.add("live", "live", tiled(9_000), version=4)
    patch, state, *_ = h.timeline(ids.TICK, "live", None, None, {**state, "range": None}, [])
    xs = [op for op in _ops(patch) if op["location"][-1] == "x"]
    assert all(op["operation"] == "Assign" and len(op["params"]["value"]) <= 3000 for op in xs)
    assert state["sent"] == max(len(op["params"]["value"]) for op in xs)
    # ... which then only extend, even though the view is decimated.
    h.store.add("live", "live", tiled(9_050), version=5)
    patch, state, *_ = h.timeline(ids.TICK, "live", None, None, state, [])
    assert {op["operation"] for op in _ops(patch) if op["location"][-1] == "x"} == {"Extend"}


def test_pause_toggles_the_interval(h: Handlers) -> None:
    assert h.pause(1) == (True, "Resume")
    assert h.pause(2) == (False, "Pause")


def test_compare_headline_is_the_cli_diff_headline(h: Handlers) -> None:
    with pytest.raises(PreventUpdate):  # nothing is computed until the tab is opened
        h.compare(None, "timeline", "a", "b", None, None)
    fig, headline, totals, state = h.compare(ids.TABS, "compare", "a", "b", None, None)
    shown = [p.children for p in headline]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["diff", str(ADDITIVE), str(SEPARATE)]) == 0
    printed = out.getvalue().splitlines()
    assert shown == printed[3 : 3 + len(shown)] and printed[3 + len(shown)] == ""
    assert shown[0] == "B (separate) drained the workload in 5 steps instead of 6 (A, stock): fewer by 1."
    assert "steps to drain" in _text(totals)
    assert isinstance(fig, go.Figure) and state == {"key": "a:0|b:0", "pair": ["a", "b"], "range": None}
    zoom = {"xaxis.range[0]": 1, "xaxis.range[1]": 3}
    patch, _, _, state = h.compare(ids.CMP_GRAPH, "compare", "a", "b", zoom, state)
    assert isinstance(patch, Patch) and state["range"] == [1.0, 3.0]
    with pytest.raises(PreventUpdate):  # a tick that changed neither side
        h.compare(ids.VERSION, "compare", "a", "b", None, state)
    assert "Load two traces" in _text(h.compare(None, "compare", "a", None, None, None)[1])


def test_compare_against_a_growing_trace_patches(h: Handlers) -> None:
    h.store.add("live", "live", tiled(10), version=1)
    _, _, _, state = h.compare(None, "compare", "a", "live", None, None)
    h.store.add("live", "live", tiled(12), version=2)
    patch, lines, _, state = h.compare(ids.VERSION, "compare", "a", "live", None, state)
    assert isinstance(patch, Patch) and state["key"] == "a:0|live:2" and lines
    assert _only_data(patch)


def test_a_comparison_and_its_chart_are_kept_for_the_pair_of_snapshots(
    h: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One memo (tracer.analysis.memo.joint_memo) keeps a pair's comparison and chart: asked
    again, by a zoom or a download, neither is made again; a new snapshot of a side is a new pair."""
    import web.callbacks
    import web.store

    made = {"compare": 0, "chart": 0}

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any) -> Any:
            made[name] += 1
            return real(*args)

        return call

    monkeypatch.setattr(web.store, "compare", counted("compare", web.store.compare))
    monkeypatch.setattr(web.callbacks, "compare_chart", counted("chart", web.callbacks.compare_chart))
    _, _, _, state = h.compare(None, "compare", "a", "b", None, None)
    h.compare(ids.CMP_GRAPH, "compare", "a", "b", {"xaxis.range[0]": 1, "xaxis.range[1]": 3}, state)
    h.download(ids.DOWNLOAD_HTML, "compare", None, state)
    assert made == {"compare": 1, "chart": 1}
    h.store.add("b", "B: separate", sample("dflash_k7_separate.jsonl"), version=1)
    _, _, _, state = h.compare(ids.VERSION, "compare", "a", "b", None, state)
    assert made == {"compare": 2, "chart": 2} and state["key"] == "a:0|b:1"


def test_downloads_rebuild_the_figure_on_the_server(h: Handlers) -> None:
    _, state, *_ = h.timeline(None, "a", None, None, None, None)
    page = h.download(ids.DOWNLOAD_HTML, "timeline", state, None)
    assert page["filename"] == "schedscope-timeline.html"
    assert "<html>" in page["content"] and "Plotly.newPlot" in page["content"]
    assert 'src="http' not in page["content"]  # plotly.js is inlined: the page opens offline
    png = h.download(ids.DOWNLOAD_PNG, "timeline", state, None)
    assert (
        png["filename"] == "schedscope-timeline.png"
        and base64.b64decode(png["content"])[:8] == b"\x89PNG\r\n\x1a\n"
    )
    _, _, _, cmp_state = h.compare(None, "compare", "a", "b", None, None)
    page = h.download(ids.DOWNLOAD_HTML, "compare", state, cmp_state)
    assert page["filename"] == "schedscope-compare.html"


def test_follow_before_the_file_exists(tmp_path: Any) -> None:
    from tracer.trace.source import TraceSource
    from web.follow import StoreFeed

    store = TraceStore()
    path = tmp_path / "later.jsonl"
    feed = StoreFeed(TraceSource.follow(path, poll=0.02, interval=0.02), store, "live", "live: ")
    h = Handlers(store, feeds=[feed])
    try:
        feed.start()
        deadline = time.monotonic() + 5
        while "waiting for" not in h.live_status() and time.monotonic() < deadline:
            time.sleep(0.01)
        fig, state, _, status = h.timeline(None, "live", None, None, None, ["on"])
        assert state is None and "waiting for" in status and "waiting for" in str(fig)
        assert h.timeline(ids.TICK, "live", None, None, None, ["on"])[0] is no_update  # nothing resent
        path.write_bytes(ADDITIVE.read_bytes())
        while store.get("live") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        fig, state, version, status = h.timeline(ids.TICK, "live", None, None, None, ["on"])
        assert isinstance(fig, dict) and fig["data"] and state["rows"] == 7 and version == "live:1"
        assert status == "following later.jsonl: 7 steps"
    finally:
        feed.stop()


def test_a_zoom_that_brings_a_newer_snapshot_moves_the_version(h: Handlers) -> None:
    _, state, *_ = h.timeline(None, "a", None, None, None, None)
    h.store.add("a", "A: grown", tiled(20), version=1)
    zoom = {"xaxis.range[0]": 1.5, "xaxis.range[1]": 9.5}
    _, zoomed, version, _ = h.timeline(ids.GRAPH, "a", zoom, None, state, None)
    assert version == "a:1" and zoomed["version"] == 1 and zoomed["rows"] == 20


def test_a_source_s_first_snapshot_has_its_figure_built_on_the_source_thread(tmp_path: Any) -> None:
    """make_app hands each feed's new view to Handlers.prepare: the first snapshot's figure is
    built there (plotly's imports and the layout frame paid off the page's first request);
    later snapshots are left to the page's requests."""
    from tracer.trace.source import TraceSource
    from web.app import make_app

    path = tmp_path / "run.jsonl"
    path.write_bytes(ADDITIVE.read_bytes())
    app = make_app(TraceSource.file(path))
    try:
        feed = app.feeds[0]  # type: ignore[attr-defined]
        assert feed.source.join(10)
        held = app.handlers._figures["a"]  # type: ignore[attr-defined]
        assert held[0].version == 1 and held[1]["data"]
        fig, state, *_ = app.handlers.timeline(None, "a", None, None, None, None)  # type: ignore[attr-defined]
        assert fig is held[1] and state["rows"] == 7
    finally:
        for feed in app.feeds:  # type: ignore[attr-defined]
            feed.stop()
