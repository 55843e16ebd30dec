"""Attaching to the real stream server (StreamHub + StreamServer, no mocks): every reconnect
point leaves saved files that load strictly and hold each step once; heartbeats keep an idle
connection alive, and a connection with no bytes at all is told apart as stalled."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tests.stream_support import records, wait_for
from tracer.cli import main
from tracer.live.stream import StreamHub, StreamServer
from tracer.render.source import source_line
from tracer.render.stream import link_status, status_line
from tracer.trace import index_files, sidecar
from tracer.trace.attach import RunSaver, StreamEvent, StreamFollower, run_path
from tracer.trace.errors import TraceError
from tracer.trace.reader import load, reopen
from tracer.trace.source import TraceSource
from tracer.trace.trace_type import Trace

BEAT = 0.1  # heartbeat interval for these tests
FAST = {"backoff": (0.01, 0.05), "timeout": 4 * BEAT}


def dumps(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def header(pid: int = 1, start_time: float = 1000.0) -> bytes:
    return dumps({"kind": "header", "schema": "1.0", "start_time": start_time, "pid": pid, "config": {}})


def step(i: int) -> bytes:
    budget = {"cap": 8, "used": 1, "left": 7}
    return dumps({"kind": "step", "step": i, "t": float(i), "target": budget, "input": budget})


def runner(i: int) -> bytes:
    return dumps({"kind": "runner", "step": i, "pass": "target", "rows": 1, "cap": 8})


def with_runner(*steps: int) -> list[bytes]:
    return [line for i in steps for line in (step(i), runner(i))]


def steps_in(path: Path) -> list[int]:
    try:
        return [int(s) for s in load(path, strict=True).columns["step"]]
    except TraceError:  # no header yet
        return []


def runner_steps(path: Path) -> list[int]:
    lines = path.read_bytes().splitlines()
    return [r["step"] for r in map(orjson.loads, lines) if r["kind"] == "runner"]


def kinds(path: Path) -> list[str]:
    return [orjson.loads(line)["kind"] for line in path.read_bytes().splitlines()]


@pytest.fixture
def serve() -> Iterator[Callable[..., StreamServer]]:
    """Start real stream servers (closed afterwards); port=0 picks a free one."""
    servers: list[StreamServer] = []

    def start(hub: StreamHub, port: int = 0) -> StreamServer:
        server = StreamServer(hub, "127.0.0.1", port, heartbeat=BEAT)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def mirrors() -> Iterator[list[TraceSource]]:
    made: list[TraceSource] = []
    yield made
    for mirror in made:
        mirror.close()


def test_reconnect_before_the_first_step_writes_one_header(
    tmp_path: Path, serve: Callable[..., StreamServer], mirrors: list[TraceSource]
) -> None:
    """The issue's case: attached before any traffic, disconnected, then the steps come."""
    hub = StreamHub()
    server = serve(hub)
    hub.publish(records([header()]))
    mirror = TraceSource.stream(server.url, save=tmp_path / "copy.jsonl", **FAST).start()
    mirrors.append(mirror)
    wait_for(lambda: kinds(tmp_path / "copy.jsonl") == ["header"])
    hub.disconnect_all()  # forced: the viewer reconnects and the server sends its header again
    wait_for(lambda: mirror.follower.reconnects == 1 and hub.viewers == 1)
    hub.publish(records(with_runner(1, 2, 3)))
    wait_for(lambda: steps_in(tmp_path / "copy.jsonl") == [1, 2, 3])
    assert kinds(tmp_path / "copy.jsonl").count("header") == 1
    assert runner_steps(tmp_path / "copy.jsonl") == [1, 2, 3]
    assert not (tmp_path / "copy.1.jsonl").exists()


def test_reconnect_mid_run_between_a_step_and_its_runner_records(
    tmp_path: Path, serve: Callable[..., StreamServer], mirrors: list[TraceSource]
) -> None:
    """Resumed from the step before the newest: nothing is lost, nothing is saved twice."""
    hub = StreamHub()
    server = serve(hub)
    hub.publish(records([header(), *with_runner(1, 2, 3), step(4)]))
    path = tmp_path / "copy.jsonl"
    mirror = TraceSource.stream(server.url, save=path, **FAST).start()
    mirrors.append(mirror)
    wait_for(lambda: steps_in(path) == [1, 2, 3, 4])
    hub.disconnect_all()
    hub.publish(records([runner(4), *with_runner(5, 6)]))  # while the viewer is away
    wait_for(lambda: steps_in(path) == [1, 2, 3, 4, 5, 6])
    hub.disconnect_all()  # and once more, right after a runner record
    hub.publish(records(with_runner(7)))
    wait_for(lambda: steps_in(path)[-1:] == [7])
    time.sleep(3 * BEAT)  # anything sent twice would have arrived by now
    trace = load(path, strict=True)
    assert list(trace.columns["step"]) == [1, 2, 3, 4, 5, 6, 7] and trace.gaps == []
    assert runner_steps(path) == [1, 2, 3, 4, 5, 6, 7]
    assert kinds(path).count("header") == 1
    assert mirror.follower.reconnects == 2 and mirror.follower.duplicates > 0


def test_reconnect_after_a_gap_saves_the_gap_once(
    tmp_path: Path, serve: Callable[..., StreamServer], mirrors: list[TraceSource]
) -> None:
    """Cut off for falling behind while the steps it missed left the backlog."""
    hub = StreamHub(backlog=6, viewer_queue=8)
    server = serve(hub)
    hub.publish(records([header(), *with_runner(1, 2)]))
    path = tmp_path / "copy.jsonl"
    mirror = TraceSource.stream(server.url, save=path, **FAST).start()
    mirrors.append(mirror)
    wait_for(lambda: steps_in(path) == [1, 2])
    hub.publish(records(with_runner(*range(3, 13))))  # 20 lines at once: over the queue, the viewer is cut
    assert hub.viewers_cut == 1
    wait_for(lambda: steps_in(path)[-1:] == [12])
    trace = load(path, strict=True)
    assert list(trace.columns["step"]) == [1, 2, 10, 11, 12]
    assert trace.gaps == [(2, 10)] and mirror.state.gaps == 1  # steps 3..9 left the backlog
    assert runner_steps(path) == [1, 2, 10, 11, 12]
    hub.publish(records(with_runner(13)))
    wait_for(lambda: steps_in(path)[-1:] == [13])
    assert kinds(path).count("header") == 1 and load(path, strict=True).gaps == [(2, 10)]


def test_a_restart_begins_a_new_file_and_says_so(
    tmp_path: Path, serve: Callable[..., StreamServer], capsys: pytest.CaptureFixture[str]
) -> None:
    """`schedscope attach --save`: a new run (new start_time and pid) on the same port goes to
    copy.1.jsonl, with the steps it published before the viewer came back."""
    hub_a = StreamHub()
    server_a = serve(hub_a)
    port = server_a.address[1]
    hub_a.publish(records([header(pid=1, start_time=1000.0), *with_runner(1, 2, 3)]))
    save = tmp_path / "copy.jsonl"
    done: list[int] = []
    attach = threading.Thread(
        target=lambda: done.append(
            main(["attach", server_a.url, "--save", str(save), "--max-reconnects", "3"])
        )
    )
    attach.start()
    wait_for(lambda: steps_in(save) == [1, 2, 3])
    server_a.close()  # the engine stops; a new one starts on the same port
    hub_b = StreamHub()
    hub_b.publish(records([header(pid=2, start_time=2000.0), *with_runner(1, 2)]))
    server_b = serve(hub_b, port)
    second = run_path(save, 1)
    wait_for(lambda: steps_in(second) == [1, 2])
    hub_b.publish(records(with_runner(3, 4)))
    wait_for(lambda: steps_in(second) == [1, 2, 3, 4])
    server_b.close()
    attach.join(5)  # the reconnect limit ends it once both servers are gone
    assert done == [0]
    assert steps_in(save) == [1, 2, 3] and load(save, strict=True).header["pid"] == 1
    assert load(second, strict=True).header["pid"] == 2 and load(second).gaps == []
    assert runner_steps(second) == [1, 2, 3, 4]
    assert not run_path(save, 2).exists()
    err = capsys.readouterr().err
    assert "# the server restarted: a new run begins (pid 2" in err
    assert f"# run 2 is saved to {second}" in err


def test_a_mirror_follows_a_restart_into_a_new_file(
    tmp_path: Path, serve: Callable[..., StreamServer], mirrors: list[TraceSource]
) -> None:
    hub_a = StreamHub()
    server_a = serve(hub_a)
    hub_a.publish(records([header(pid=1, start_time=1000.0), step(1)]))
    mirror = TraceSource.stream(server_a.url, save=tmp_path / "live.jsonl", **FAST).start()
    mirrors.append(mirror)
    wait_for(lambda: steps_in(tmp_path / "live.jsonl") == [1])
    assert mirror.saver.path == tmp_path / "live.jsonl" and mirror.state.link.run == 1
    port = server_a.address[1]
    server_a.close()
    hub_b = StreamHub(backlog=2)
    hub_b.publish(records([header(pid=2, start_time=2000.0), *(step(i) for i in range(1, 6))]))
    serve(hub_b, port)
    wait_for(lambda: mirror.saver.path == tmp_path / "live.1.jsonl" and steps_in(mirror.saver.path) == [4, 5])
    # Steps 1..3 of the new run left its backlog before the viewer got back: an explicit gap.
    assert load(mirror.saver.path, strict=True).gaps == [(0, 4)]
    assert "new run 2 (the server restarted) → live.1.jsonl" in source_line(mirror.state)
    assert steps_in(tmp_path / "live.jsonl") == [1]


def test_an_idle_server_sends_heartbeats_and_is_never_reconnected(
    tmp_path: Path, serve: Callable[..., StreamServer]
) -> None:
    hub = StreamHub()
    server = serve(hub)
    hub.publish(records([header(), step(1), step(2)]))
    follower = StreamFollower(server.url, **FAST)
    events: list[StreamEvent] = []
    saver = RunSaver(tmp_path / "copy.jsonl")
    deadline = time.monotonic() + 12 * BEAT  # three read timeouts
    published = False
    for event in follower.events():
        events.append(event)
        saver.handle(event)
        if not published and time.monotonic() > deadline - 5 * BEAT:
            hub.publish(records([step(3)]))  # traffic ends the idle period; another one begins
            published = True
        if time.monotonic() > deadline:
            break
    saver.close()
    beats = [e for e in events if e.kind == "heartbeat"]
    assert len(beats) >= 6 and follower.reconnects == 0
    assert beats[0].record is not None and beats[0].record["last_step"] == 2
    assert isinstance(beats[0].record["idle_since"], float)
    idle = [status_line(e) for e in events if e.kind == "status" and status_line(e).startswith("idle")]
    assert len(idle) == 2  # once per idle period, not per heartbeat
    assert idle[0].startswith("idle since ") and idle[0].endswith("(last step 2)")
    assert idle[1].endswith("(last step 3)")
    assert follower.state.phase == "idle" and link_status(follower.state).startswith("idle since")
    assert "heartbeat" not in kinds(tmp_path / "copy.jsonl")
    assert steps_in(tmp_path / "copy.jsonl") == [1, 2, 3]


def test_the_mirror_reports_idle_and_saves_no_heartbeat(
    tmp_path: Path, serve: Callable[..., StreamServer], mirrors: list[TraceSource]
) -> None:
    hub = StreamHub()
    server = serve(hub)
    mirror = TraceSource.stream(server.url, save=tmp_path / "m.jsonl", **FAST).start()
    mirrors.append(mirror)
    wait_for(lambda: mirror.state.phase == "idle")  # nothing published at all yet
    assert source_line(mirror.state) == "idle (no step yet)"
    hub.publish(records([header(), step(1)]))
    wait_for(lambda: mirror.state.phase == "idle" and mirror.state.link.last_step == 1)
    assert source_line(mirror.state).startswith("idle since ") and source_line(mirror.state).endswith(
        "(last step 1)"
    )
    time.sleep(6 * BEAT)
    assert mirror.follower.reconnects == 0 and kinds(tmp_path / "m.jsonl") == ["header", "step"]


class _Silent:
    """A server that accepts connections and then sends nothing (optionally an HTTP response
    head and a header record first), as a wedged process or a dead network path would."""

    def __init__(self, prelude: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.prelude = prelude
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/trace"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.recv(4096)
            conn.sendall(self.prelude)

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.mark.parametrize(
    "prelude",
    [b"", b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n" + header()],
    ids=["no-response", "response-then-nothing"],
)
def test_a_silent_connection_is_stalled_and_reconnected(prelude: bytes) -> None:
    server = _Silent(prelude)
    try:
        follower = StreamFollower(server.url, **FAST)
        events = list(follower.events(max_reconnects=1))
        stalls = [e for e in events if e.kind == "status" and status_line(e).startswith("stalled")]
        assert len(stalls) == 2 and follower.reconnects == 1  # stalled, reconnected, stalled again
        assert status_line(stalls[0]) == "stalled: no data for 0.4s, not even a heartbeat"
        assert stalls[0].state is not None and stalls[0].state.phase == "stalled"
        assert link_status(stalls[0].state).startswith("stalled: no data for 0.4s")
        assert not any(status_line(e).startswith("idle") for e in events if e.kind == "status")
        assert status_line(events[-1]) == "giving up after 1 reconnects"
    finally:
        server.close()


def test_a_refused_mirror_says_so(tmp_path: Path, mirrors: list[TraceSource]) -> None:
    hub = StreamHub()
    hub.publish(records([header(), step(1)]))
    server = StreamServer(hub, "127.0.0.1", 0, token="s3cret", heartbeat=BEAT)
    try:
        mirror = TraceSource.stream(server.url, save=tmp_path / "m.jsonl", token="wrong", **FAST).start()
        mirrors.append(mirror)
        wait_for(lambda: mirror.state.phase == "unauthorised")  # a token problem, not retried
        assert source_line(mirror.state).startswith("unauthorised: HTTP 401")
        assert (tmp_path / "m.jsonl").read_bytes() == b""
    finally:
        server.close()


def test_link_status_names_every_state() -> None:
    from tracer.trace.attach import LinkState

    s = LinkState("http://h:1/trace")
    assert link_status(s) == "connecting to http://h:1/trace"
    assert link_status(LinkState("u", "live", last_step=7)) == "live · step 7"
    assert link_status(LinkState("u", "reconnecting", "the server closed the stream", 3)) == (
        "reconnecting (the server closed the stream) · last step 3"
    )
    gave_up = LinkState("u", "gave up", "limit", reconnects=4)
    assert link_status(gave_up) == "gave up after 4 reconnects (limit)"
    assert run_path(Path("/x/copy.jsonl"), 2) == Path("/x/copy.2.jsonl")
    assert run_path(Path("copy"), 1) == Path("copy.1")


# -- a saved copy's recording index ---------------------------------------------------------------
def _generated(out: Path, *extra: str) -> Path:
    """bench/gen_trace.py's records (the recorder's own writer), without its recording index."""
    args = [
        "--seed",
        "5",
        "--arrival-rate",
        "3",
        "--kv-blocks",
        "8000",
        "--budget",
        "8192",
        "--no-index",
        *extra,
    ]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args], check=True)
    return out


def _same_trace(a: Trace, b: Trace) -> None:
    assert len(a) == len(b) and a.gaps == b.gaps and a.footer == b.footer
    for name in b.columns:
        assert np.array_equal(a.columns[name], b.columns[name]), name
    assert a.entries is not None and b.entries is not None
    for name, values in b.entries.arrays().items():
        assert np.array_equal(a.entries.arrays()[name], values), name


def test_a_saved_copy_is_indexed_as_it_is_written(tmp_path: Path, serve: Callable[..., StreamServer]) -> None:
    """A viewer's `--save` copy of a real stream server carries the recorder's records (256
    running, about 24 MB); its recording index, in segments as it was written, is what a parse of
    the copy gives, so its first open maps it."""
    source = _generated(tmp_path / "served.jsonl", "--steps", "2400", "--max-running", "256")
    lines = source.read_bytes().splitlines(keepends=True)
    hub = StreamHub(backlog=len(lines))
    server = serve(hub)
    hub.publish(records(lines))
    copy = tmp_path / "copy.jsonl"
    saver = RunSaver(copy, index_interval=0.2)
    for event in StreamFollower(server.url, **FAST).events():
        saver.handle(event)
        if (event.record or {}).get("kind") == "footer":
            break
    saver.close()
    assert copy.read_bytes() == source.read_bytes()
    assert copy.stat().st_size >= sidecar.MIN_SOURCE_BYTES
    index = copy.with_name(copy.name + index_files.SUFFIX)
    assert index.exists()
    mapped = reopen(copy)
    assert mapped is not None, "the copy's index was not taken"
    _same_trace(mapped, load(copy, sidecar=False, entries=True))


def test_a_gap_ends_a_copys_index_and_the_rest_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream copy with a declared hole: the index covers the steps before the gap (a
    segment per record here), the reader parses from the gap on, and the copy loads as a
    parse of it does, gap included."""
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)
    source = _generated(tmp_path / "served.jsonl", "--steps", "300", "--max-running", "32")
    events = []
    for line in source.read_bytes().splitlines(keepends=True):
        record = orjson.loads(line)
        if record["kind"] in ("step", "runner") and 150 <= record["step"] < 160:
            if record["kind"] == "step" and record["step"] == 150:
                gap = {"kind": "gap", "after": 149, "before": 160, "reason": "not received"}
                events.append(StreamEvent("record", gap, dumps(gap)))
            continue
        events.append(StreamEvent("run" if record["kind"] == "header" else "record", record, line))
    copy = tmp_path / "copy.jsonl"
    saver = RunSaver(copy, index_interval=0.0)
    for event in events:
        saver.handle(event)
    index = saver._index
    saver.close()
    assert index is not None and index.failed == "the trace stopped" and index._segment > 100
    parsed = load(copy, sidecar=False, entries=True)
    assert parsed.gaps and len(parsed) == 290
    _same_trace(load(copy, entries=True), parsed)


def test_every_note_of_the_follower_is_worded_in_render() -> None:
    """The follower keeps facts; tracer.render.stream words each of its notes as `attach`
    prints them (pinned from the words the follower made itself before)."""
    from tracer.trace import attach
    from tracer.trace.attach import LinkState

    url = "http://h:1/trace"

    def said(note: str, facts: dict | None = None, **state: object) -> str:
        return status_line(StreamEvent("status", note=note, state=LinkState(url, **state), facts=facts or {}))

    assert said(attach.GIVING_UP, reconnects=3) == "giving up after 3 reconnects"
    assert said(attach.RETRYING, {"delay": 0.4}, last_step=7) == "reconnecting in 0.4s after step 7"
    assert said(attach.CONNECTED) == f"connected to {url}"
    assert said(attach.DROPPED, cause=attach.CLOSED) == "the server closed the stream"
    assert said(attach.DROPPED, detail="HTTP 500 Oops") == "HTTP 500 Oops"
    assert said(attach.UNAUTHORISED, detail="HTTP 401 No") == "unauthorised: HTTP 401 No"
    assert said(attach.REFUSED, detail="HTTP 404 Not Found") == "refused: HTTP 404 Not Found"
    stalled = {"cause": attach.STALLED, "timeout": 0.4}
    assert said(attach.STALL, **stalled) == "stalled: no data for 0.4s, not even a heartbeat"
    assert link_status(LinkState(url, "stalled", **stalled)) == (  # type: ignore[arg-type]
        "stalled: no data for 0.4s, not even a heartbeat · reconnecting"
    )
    assert said(attach.DISCONNECTED, {"error": "boom"}) == "disconnected: boom"
    assert said(attach.LONG_LINE) == "dropped a line longer than 16 MiB"
    assert said(attach.NOT_JSON, {"head": b"xyz"}) == "skipped a line that is not JSON (b'xyz'…)"
    assert (
        said(attach.RESTARTED, {"pid": 12, "start": None})
        == "the server restarted: a new run begins (pid 12)"
    )
    assert said(attach.IDLE, phase="idle", last_step=5) == "idle (last step 5)"
