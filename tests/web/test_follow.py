from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.stream_support import records
from tracer.trace.reader import Trace
from web.follow import FileFollower

from .helpers import lines


class Sink:
    def __init__(self) -> None:
        self.traces: list[tuple[int, int]] = []

    def __call__(self, trace: Trace, version: int) -> None:
        self.traces.append((len(trace), version))


def test_follows_a_growing_file_step_by_step(tmp_path: Path) -> None:
    src = lines()
    path = tmp_path / "live.jsonl"
    sink = Sink()
    f = FileFollower(path, sink)
    assert not f.poll() and "waiting" in f.status
    path.write_bytes(src[0])
    assert f.poll() and sink.traces[-1] == (0, 1)  # header only: an empty trace to show
    with path.open("ab") as out:
        out.write(src[1] + src[2][:50])  # a step and a half: the torn half waits
    assert f.poll() and sink.traces[-1] == (1, 2)
    with path.open("ab") as out:
        out.write(src[2][50:])
    assert f.poll() and sink.traces[-1] == (2, 3)
    assert not f.poll()  # nothing new, nothing published
    path.write_bytes(src[0] + src[1])  # rewritten shorter: start over
    assert f.poll() and sink.traces[-1] == (1, 4)


def test_the_thread_publishes_within_a_second(tmp_path: Path) -> None:
    src = lines()
    path = tmp_path / "live.jsonl"
    path.write_bytes(src[0] + src[1])
    sink = Sink()
    f = FileFollower(path, sink, interval=0.05).start()
    try:
        with path.open("ab") as out:
            out.write(src[2] + src[3])
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and (not sink.traces or sink.traces[-1][0] < 3):
            time.sleep(0.02)
        assert sink.traces[-1][0] == 3
    finally:
        f.stop()


def test_a_bad_header_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"kind":"step","step":1}\n')
    sink = Sink()
    f = FileFollower(path, sink)
    assert not f.poll() and "cannot follow" in f.status
    assert not f.poll()  # the same bad file is not read again
    path.write_bytes(b"".join(lines()[:2]))  # rewritten as a trace: it is followed
    assert f.poll() and sink.traces[-1] == (1, 1)


def test_compressed_files_cannot_be_followed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"plain \.jsonl"):
        FileFollower(tmp_path / "x.jsonl.gz", Sink()).start()


def test_attach_status_leads_the_live_status_and_a_new_run_redraws(tmp_path: Path) -> None:
    """make_app(attach=mirror) over the real stream server: the mirror's state is shown, and a
    restart's new file replaces the timeline with a whole new figure, not a patch."""
    import orjson
    import plotly.graph_objects as go

    from tracer.live.attach import StreamMirror
    from tracer.live.stream import StreamHub, StreamServer
    from web import layout as ids
    from web.app import make_app
    from web.callbacks import LIVE

    src = lines()
    head = orjson.loads(src[0])
    restarted = orjson.dumps({**head, "pid": head["pid"] + 1, "start_time": head["start_time"] + 60}) + b"\n"
    hub_a = StreamHub()
    hub_a.publish(records(src[:4]))
    server_a = StreamServer(hub_a, "127.0.0.1", 0, heartbeat=0.1)
    port = server_a.address[1]
    servers = [server_a]
    mirror = StreamMirror(server_a.url, tmp_path / "live.jsonl", timeout=0.4, backoff=(0.01, 0.05))
    app = make_app(follow=mirror.path, attach=mirror, follow_interval=0.05)
    h = app.handlers  # type: ignore[attr-defined]
    store = app.store  # type: ignore[attr-defined]

    def wait(label: str, rows: int) -> None:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            view = store.get(LIVE)
            if mirror.state.phase == "idle" and view and view.label == label and len(view) == rows:
                return
            time.sleep(0.02)

    try:
        wait("live: live.jsonl", 3)
        fig, state, _, status = h.timeline(None, LIVE, None, None, None, ["on"])
        assert isinstance(fig, go.Figure) and state["rows"] == 3
        assert status.startswith("idle since ") and "(last step 3) · following live.jsonl: 3 steps" in status
        server_a.close()
        hub_b = StreamHub()
        hub_b.publish(records([restarted, *src[1:6]]))
        servers.append(StreamServer(hub_b, "127.0.0.1", port, heartbeat=0.1))
        wait("live: live.1.jsonl", 5)
        fig, state2, _, status = h.timeline(ids.TICK, LIVE, None, None, state, ["on"])
        assert isinstance(fig, go.Figure) and state2["rows"] == 5 and state2["run"] != state["run"]
        assert "new run 2 (the server restarted) → live.1.jsonl" in status
    finally:
        app.follower.stop()  # type: ignore[attr-defined]
        mirror.stop()
        for server in servers:
            server.close()
