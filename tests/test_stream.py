"""The live stream: real scheduler -> hub -> HTTP -> follower, viewers that stall
or vanish, resume with explicit gaps, garbage, and the loopback/token rules."""

from __future__ import annotations

import errno
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.stream_support import records
from tracer.live.stream import StreamConfigError, StreamHub, StreamServer, parse_bind
from tracer.render.stream import status_line
from tracer.trace.attach import StreamFollower
from tracer.trace.reader import load


def step_line(i: int) -> bytes:
    budget = {"cap": 8, "used": 1, "left": 7}
    rec = {"kind": "step", "step": i, "t": 0.0, "target": budget, "input": budget}
    return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)


HEADER = orjson.dumps(
    {"kind": "header", "schema": "1.0", "pid": 1, "config": {}}, option=orjson.OPT_APPEND_NEWLINE
)


def collect(follower: StreamFollower, n: int, timeout: float = 10, **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    for event in follower.events(**kw):
        if event.kind in ("run", "record"):
            out.append(event.record or {})
        if len([r for r in out if r["kind"] in ("step", "gap")]) >= n or time.monotonic() > deadline:
            break
    return out


def test_flush_returns_once_viewers_got_the_footer_and_is_bounded_by_a_stalled_one() -> None:
    """At shutdown the footer is published just before EngineCore exits, and the viewers' HTTP
    threads are daemons: `hub.flush` returns only once each reading viewer has it on its socket,
    and a viewer that stopped reading costs the bound, never a hang."""
    hub = StreamHub()
    server = StreamServer(hub, "127.0.0.1", 0)
    try:
        hub.publish(records([HEADER, step_line(1)]))
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            while hub.viewers < 1:
                time.sleep(0.01)
            (viewer,) = hub._viewers
            footer = orjson.dumps({"kind": "footer", "steps_written": 1}) + b"\n"
            hub.publish(records([footer]))
            assert viewer.unsent == 1
            assert hub.flush(5.0)
            assert viewer.unsent == 0  # written and flushed before flush() returned
            got = b""
            while not got.endswith(footer):
                got += resp.read1(65536)
        # A viewer whose HTTP thread sends nothing (stalled on a full socket): the bound holds.
        stalled, _ = hub.subscribe(0)
        hub.publish(records([step_line(2)]))
        t0 = time.monotonic()
        assert not hub.flush(0.5)
        assert 0.45 < time.monotonic() - t0 < 2.0
        assert stalled.unsent == 1
        hub.unsubscribe(stalled)
    finally:
        server.close()


def test_backlog_then_live_to_two_viewers() -> None:
    hub = StreamHub()
    server = StreamServer(hub, "127.0.0.1", 0)
    try:
        hub.publish(records([HEADER, step_line(1), step_line(2)]))
        results: list[list[dict[str, Any]]] = [[], []]

        def view(k: int) -> None:
            results[k] = collect(StreamFollower(server.url), 5)

        threads = [threading.Thread(target=view, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        while hub.viewers < 2:
            time.sleep(0.01)
        hub.publish(records([step_line(3), step_line(4), step_line(5)]))
        for t in threads:
            t.join(10)
        for got in results:
            assert got[0]["kind"] == "header"
            assert [r["step"] for r in got if r["kind"] == "step"] == [1, 2, 3, 4, 5]
    finally:
        server.close()


def test_resume_after_since_reports_what_left_the_backlog() -> None:
    hub = StreamHub(backlog=5)
    server = StreamServer(hub, "127.0.0.1", 0)
    try:
        hub.publish(records([HEADER, *(step_line(i) for i in range(1, 21))]))
        follower = StreamFollower(server.url)
        follower.last_step = 3  # as if it had seen steps 1..3 before a disconnect
        got = collect(follower, 6)
        gap = next(r for r in got if r["kind"] == "gap")
        assert (gap["after"], gap["before"]) == (3, 16)
        assert [r["step"] for r in got if r["kind"] == "step"] == [16, 17, 18, 19, 20]
    finally:
        server.close()


def test_a_stalled_viewer_is_cut_off_and_never_waited_for() -> None:
    hub = StreamHub(viewer_queue=50)
    server = StreamServer(hub, "127.0.0.1", 0)
    try:
        hub.publish(records([HEADER]))
        host, port = server.address[:2]
        stalled = socket.create_connection((host, port))
        stalled.sendall(b"GET /trace HTTP/1.1\r\nHost: x\r\n\r\n")  # and never reads
        while hub.viewers < 1:
            time.sleep(0.01)
        pad = b" " * 2000
        worst = 0.0
        for i in range(1, 5001):
            start = time.perf_counter()
            hub.publish(records([step_line(i)[:-1] + pad + b"\n"]))
            worst = max(worst, time.perf_counter() - start)
        assert hub.viewers_cut == 1 and hub.viewers == 0
        assert worst < 0.5  # publish never blocked on the stalled socket
        stalled.close()
    finally:
        server.close()


def test_a_viewer_killed_mid_stream_is_forgotten() -> None:
    hub = StreamHub()
    server = StreamServer(hub, "127.0.0.1", 0)
    try:
        hub.publish(records([HEADER]))
        host, port = server.address[:2]
        conn = socket.create_connection((host, port))
        conn.sendall(b"GET /trace HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.recv(100)
        conn.close()
        for i in range(200):
            hub.publish(records([step_line(i + 1)]))
            time.sleep(0.002)
            if hub.viewers == 0:
                break
        assert hub.viewers == 0
    finally:
        server.close()


def test_non_loopback_needs_a_token_and_the_token_is_checked() -> None:
    with pytest.raises(StreamConfigError, match=r"refusing to stream on non-loopback address 0\.0\.0\.0"):
        StreamServer(StreamHub(), "0.0.0.0", 0)
    assert parse_bind("8799") == ("127.0.0.1", 8799)
    assert parse_bind(":9000") == ("127.0.0.1", 9000)
    hub = StreamHub()
    hub.publish(records([HEADER, step_line(1)]))
    server = StreamServer(hub, "127.0.0.1", 0, token="s3cret")
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url, timeout=5)
        assert err.value.code == 401
        events = list(StreamFollower(server.url, token="wrong").events(max_reconnects=0))
        assert status_line(events[-1]).startswith("unauthorised: HTTP 401")  # a token problem, not retried
        got = collect(StreamFollower(server.url, token="s3cret"), 1)
        assert [r["kind"] for r in got] == ["header", "step"]
    finally:
        server.close()


class _Garbage(BaseHTTPRequestHandler):
    calls = 0

    def do_GET(self) -> None:
        type(self).calls += 1
        self.send_response(200)
        self.end_headers()
        if type(self).calls == 1:
            self.wfile.write(
                HEADER + step_line(1) + b"\xff\xfe not json\n[1,2]\n" + step_line(2) + b'{"kind":"st'
            )
        else:
            self.wfile.write(HEADER + step_line(3))

    def log_message(self, *args: Any) -> None:
        pass


def test_garbage_and_a_stream_cut_mid_line_never_raise() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/trace"
        follower = StreamFollower(url, backoff=(0.01, 0.02))
        events = []
        for event in follower.events(max_reconnects=1):
            events.append(event)
        steps = [e.record["step"] for e in events if e.kind == "record" and e.record["kind"] == "step"]
        assert steps == [1, 2, 3]
        assert follower.garbage == 2
        assert any("not JSON" in status_line(e) for e in events if e.kind == "status")
        assert any(status_line(e).startswith("reconnecting") for e in events if e.kind == "status")
    finally:
        httpd.shutdown()


@pytest.mark.vllm
def test_real_scheduler_streams_what_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TracingScheduler with SCHEDSCOPE_STREAM: the stream carries the file's records."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("SCHEDSCOPE_STREAM", "127.0.0.1:0")
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the hub beside the writer thread
    spec, requests = SCENARIOS["ngram_preempt"]
    sched = build_scheduler(spec, TracingScheduler)
    server = sched._schedscope_stream
    assert server is not None and server.url.startswith("http://127.0.0.1:")
    received: list[bytes] = []
    follower = StreamFollower(server.url)

    def view() -> None:
        for event in follower.events(max_reconnects=0):
            if event.kind in ("run", "record"):  # a run's header, then its records
                received.append(event.line)
                if event.record and event.record["kind"] == "footer":
                    return

    viewer = threading.Thread(target=view, daemon=True)
    viewer.start()
    deadline = time.monotonic() + 30
    while server.hub.viewers < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    run_workload(sched, requests, accept=mixed_accept)
    sched.shutdown()
    viewer.join(60)  # generous: a loaded CI machine, not a timing assertion
    assert not viewer.is_alive(), "the footer never reached the viewer"
    server.close()
    saved = tmp_path / "saved.jsonl"
    saved.write_bytes(b"".join(received))
    assert saved.read_bytes() == (tmp_path / "t.jsonl").read_bytes()
    assert len(load(saved)) == len(load(tmp_path / "t.jsonl")) > 10


@pytest.mark.vllm
@pytest.mark.parametrize("mode", [[], ["--synthetic"]])
def test_stream_bench_quick_completes_without_drops(mode: list[str]) -> None:
    """CI guard (not a timing): the load bench in --quick mode runs and both
    viewers receive every step."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    bench = ROOT / "bench" / "stream_bench.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--quick", *mode], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "0 drops to both viewers" in done.stdout


def test_attach_saves_a_trace_with_gaps_and_reads_the_same(tmp_path: Path) -> None:
    """`tui/web --attach URL --save FILE`: the source feeds its builder from the stream and tees
    it into FILE; the saved file loads to the same trace the viewer was shown."""
    from tracer.opening.door import Spec, open_input

    hub = StreamHub(backlog=3)
    server = StreamServer(hub, "127.0.0.1", 0)
    source = open_input(Spec(attach=server.url, save=str(tmp_path / "m.jsonl"))).live
    assert source is not None and source.mode.value == "stream"
    try:
        hub.publish(records([HEADER, *(step_line(i) for i in range(1, 6))]))
        source.bind(on_update=lambda trace, version: None).start()
        deadline = time.monotonic() + 10
        while (source.trace is None or len(source.trace) < 3) and time.monotonic() < deadline:
            time.sleep(0.02)
        hub.publish(records([step_line(6)]))
        while (source.trace is None or len(source.trace) < 4) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert source.trace is not None and list(source.trace.columns["step"]) == [3, 4, 5, 6]
        assert source.state.gaps == 0
        saved = load(tmp_path / "m.jsonl")
        assert list(saved.columns["step"]) == [3, 4, 5, 6] and saved.path == source.trace.path
    finally:
        source.close()
        server.close()


def test_a_viewer_that_connects_before_the_header_still_gets_it() -> None:
    hub = StreamHub()
    server = StreamServer(hub, "127.0.0.1", 0)
    try:
        got: list[dict[str, Any]] = []
        viewer = threading.Thread(target=lambda: got.extend(collect(StreamFollower(server.url), 1)))
        viewer.start()
        while hub.viewers < 1:
            time.sleep(0.01)
        hub.publish(records([HEADER, step_line(1)]))
        viewer.join(10)
        assert [r["kind"] for r in got] == ["header", "step"]
    finally:
        server.close()


# -- the stream's port: never one another socket holds --------------------------------------------


@pytest.mark.parametrize("kind", ["stream", "metrics"])
def test_a_port_the_api_server_has_bound_is_not_taken(kind: str) -> None:
    """`vllm serve` binds its --port before its engine starts and listens on it after. A stream
    (or metrics) port set to the same number must fail to start, which the tracer logs and goes
    on without, and not take the port: with SO_REUSEADDR it did, vLLM's listen() failed and its
    /health was answered by the stream."""
    from tracer.live.metrics import MetricsServer, TraceMetrics

    api = socket.socket()
    api.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as vLLM's create_server_socket
    api.bind(("127.0.0.1", 0))
    port = api.getsockname()[1]
    try:
        with pytest.raises(OSError) as refused:
            if kind == "stream":
                StreamServer(StreamHub(), "127.0.0.1", port)
            else:
                MetricsServer(TraceMetrics(), "127.0.0.1", port)
        assert refused.value.errno == errno.EADDRINUSE
        api.listen()  # the API server still gets its port
    finally:
        api.close()


def test_a_port_held_only_by_closed_connections_is_taken_again() -> None:
    """A server restarted while its last run's viewer connections wait out TIME_WAIT gets its
    stream port back (what SO_REUSEADDR was there for)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    conn.close()  # the server's end closes first, so it is the one left in TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    plain = socket.socket()
    with pytest.raises(OSError) as held:  # the premise: a bind without SO_REUSEADDR is refused
        plain.bind(("127.0.0.1", port))
    plain.close()
    assert held.value.errno == errno.EADDRINUSE
    server = StreamServer(StreamHub(), "127.0.0.1", port)
    try:
        assert server.address[1] == port
    finally:
        server.close()
