"""tracer.trace.source.TraceSource without any UI: a complete file (read progressively), a
growing file appended in chunks (a torn line included), gzip by its magic bytes, strict and
lenient, and a live stream from the real StreamServer (401, a reconnect, and the --save tee)."""

from __future__ import annotations

import gzip
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.stream_support import records, wait_for
from tracer.live.stream import StreamHub, StreamServer
from tracer.render.source import source_line
from tracer.trace.errors import TraceError, TraceHeaderError
from tracer.trace.reader import load
from tracer.trace.source import Mode, Phase, SourceState, TraceSource
from tracer.trace.trace_type import Trace

ROOT = Path(__file__).resolve().parent.parent
ADDITIVE = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"
FAST = {"backoff": (0.01, 0.05), "timeout": 0.4}


class Recorder:
    """Every callback of one source, as it came (on the source's thread)."""

    def __init__(self, source: TraceSource) -> None:
        self.updates: list[tuple[int, int]] = []  # (steps, version)
        self.states: list[SourceState] = []
        self.errors: list[TraceError] = []
        self.progress: list[tuple[int, int]] = []
        self.last: Trace | None = None
        self.lock = threading.Lock()
        source.bind(
            on_update=self._update,
            on_state=self.states.append,
            on_error=self.errors.append,
            on_progress=lambda done, total: self.progress.append((done, total)),
        )

    def _update(self, trace: Trace, version: int) -> None:
        with self.lock:
            self.updates.append((len(trace), version))
            self.last = trace

    @property
    def steps(self) -> int:
        return self.updates[-1][0] if self.updates else -1

    def phases(self) -> list[Phase]:
        return [s.phase for s in self.states]


def same(a: Trace, b: Trace) -> bool:
    return all(np.array_equal(a.columns[k], b.columns[k]) for k in a.columns) and all(
        np.array_equal(a.runner[k], b.runner[k]) for k in a.runner
    )


def sample_lines() -> list[bytes]:
    return [line for line in ADDITIVE.read_bytes().splitlines(keepends=True) if line.strip()]


def tiled(n: int) -> bytes:
    """The sample's header, then its steps repeated and renumbered up to n."""
    records = [orjson.loads(line) for line in sample_lines()]
    steps = [r for r in records if r["kind"] == "step"]
    out = [orjson.dumps(records[0]) + b"\n"]
    out += [orjson.dumps({**steps[i % len(steps)], "step": i + 1}) + b"\n" for i in range(n)]
    return b"".join(out)


# -- a complete file ---------------------------------------------------------------------------
def test_a_complete_file_loads_progressively_and_ends_equal_to_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracer.trace.source

    monkeypatch.setattr(tracer.trace.source, "CHUNK", 1 << 20)  # 8 MiB reads in a 6 MB file: one
    path = tmp_path / "big.jsonl"
    path.write_bytes(tiled(12_000))  # about 6 MB: several snapshots on the way
    source = TraceSource.file(path, interval=0.0)
    seen = Recorder(source)
    assert source.start().join(30)
    versions = [v for _, v in seen.updates]
    steps = [n for n, _ in seen.updates]
    assert versions == list(range(1, len(versions) + 1)) and len(versions) >= 3
    assert 0 < steps[0] < 12_000 and steps == sorted(steps) and steps[-1] == 12_000
    assert all(b >= 2 * a for a, b in zip(steps, steps[1:-1], strict=False))  # noqa: RUF007 (doublings while loading)
    assert seen.phases()[0] is Phase.LOADING and seen.phases()[-1] is Phase.COMPLETE
    assert seen.progress[-1] == (path.stat().st_size, path.stat().st_size)
    assert seen.last is not None and same(seen.last, load(path)) and seen.errors == []
    assert source_line(source.state) == "big.jsonl: 12000 steps"


def test_a_held_file_reads_nothing_until_released_or_the_hold_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hold() pauses a complete file's reading between chunks (the web app, while its page
    loads and draws a first figure); release() resumes it at once, and a hold ends by itself."""
    import tracer.trace.source

    monkeypatch.setattr(tracer.trace.source, "CHUNK", 1 << 20)
    monkeypatch.setenv("SCHEDSCOPE_SIDECAR", "off")
    path = tmp_path / "big.jsonl"
    path.write_bytes(tiled(12_000))
    source = TraceSource.file(path, interval=0.0)
    seen = Recorder(source)
    source.hold(30)
    assert source.held
    source.start()
    wait_for(lambda: seen.progress)
    time.sleep(0.3)
    assert seen.progress == [(1 << 20, path.stat().st_size)] and source.state.phase is Phase.LOADING
    source.release()
    assert source.join(30) and seen.steps == 12_000 and not source.held
    again = TraceSource.file(path, interval=0.0)
    again.hold(0.2)
    started = time.monotonic()
    assert again.start().join(30) and time.monotonic() - started >= 0.2  # ended by itself
    follow = TraceSource.follow(path)
    follow.hold(30)
    assert not follow.held  # a followed file or a stream is never held


def test_a_complete_file_leaves_a_sidecar_the_next_open_maps_instead_of_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracer.trace import builder, sidecar

    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "run.jsonl"
    path.write_bytes(tiled(3_000))
    source = TraceSource.file(path, interval=0.0)
    first = Recorder(source)
    assert source.start().join(30) and first.errors == []
    assert (tmp_path / "run.jsonl.ssidx").exists()  # written after the last snapshot
    # The second open parses nothing: one snapshot, straight from the sidecar, equal to a parse.
    monkeypatch.setattr(builder.TraceBuilder, "_consume", lambda *a: pytest.fail("parsed the file again"))
    again = TraceSource.file(path, interval=0.0)
    second = Recorder(again)
    assert again.start().join(30) and second.errors == []
    assert [n for n, _ in second.updates] == [3_000] and second.phases()[-1] is Phase.COMPLETE
    assert second.last is not None and first.last is not None and same(second.last, first.last)
    assert second.last.step(2999) == first.last.step(2999)


def test_a_loaded_trace_is_posted_as_it_is_without_reading_its_file(tmp_path: Path) -> None:
    """TraceSource.loaded: one snapshot, the very Trace given (its memo with it), complete; the
    file is not opened again (here it is gone)."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(ADDITIVE.read_bytes())
    trace = load(path)
    path.unlink()
    source = TraceSource.loaded(trace)
    seen = Recorder(source)
    assert source.start().join(10)
    assert seen.errors == [] and seen.updates == [(7, 1)] and seen.last is trace
    assert seen.phases()[-1] is Phase.COMPLETE and not source.live
    assert source_line(source.state) == "run.jsonl: 7 steps"


def test_a_small_file_is_one_snapshot_and_gzip_is_told_by_its_magic(tmp_path: Path) -> None:
    plain = TraceSource.file(ADDITIVE)
    seen = Recorder(plain)
    assert plain.start().join(10)
    assert seen.updates == [(7, 1)]
    packed = tmp_path / "copy.trace"  # no .gz suffix: the magic bytes decide
    packed.write_bytes(gzip.compress(ADDITIVE.read_bytes()))
    zipped = TraceSource.file(packed)
    assert zipped.start().join(10)
    assert zipped.trace is not None and same(zipped.trace, load(ADDITIVE))


def test_a_cut_gzip_file_keeps_what_decompressed(tmp_path: Path) -> None:
    data = gzip.compress(tiled(2_000))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    source = TraceSource.file(path)
    assert source.start().join(10)
    reference = load(path)  # the reader's own answer for the same file
    assert source.trace is not None and 0 < len(source.trace) == len(reference) < 2_000
    assert [str(p) for p in source.trace.problems] == [str(p) for p in reference.problems]


def test_strict_stops_at_a_malformed_line_and_lenient_skips_it(tmp_path: Path) -> None:
    lines = sample_lines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(lines[0] + lines[1] + b'{"kind":"step","step":2,"t":1,"target":{"cap":1}}\n' + lines[3])
    strict = TraceSource.file(path)
    seen = Recorder(strict)
    assert strict.start().join(10)
    assert len(seen.errors) == 1 and seen.updates == []
    error = seen.errors[0]
    assert (error.line, error.field) == (3, "input") and not isinstance(error, TraceHeaderError)
    assert strict.state.phase is Phase.FAILED and "bad.jsonl:3: field 'input': missing" in source_line(
        strict.state
    )
    lenient = TraceSource.file(path, strict=False)
    assert lenient.start().join(10)
    assert lenient.trace is not None and len(lenient.trace) == 2 and len(lenient.trace.problems) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "no complete header record (empty file)"),
        (b'{"kind":"step","step":1}\n', "the first record must be a header"),
    ],
)
def test_unreadable_files_are_one_error_naming_the_file(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "t.jsonl"
    if content is not None:
        path.write_bytes(content)
    source = TraceSource.file(path)
    seen = Recorder(source)
    assert source.start().join(10)
    assert len(seen.errors) == 1 and message in str(seen.errors[0]) and str(path) in str(seen.errors[0])


# -- a growing file ----------------------------------------------------------------------------
def test_a_growing_file_appended_in_chunks_with_a_torn_line(tmp_path: Path) -> None:
    lines = sample_lines()
    path = tmp_path / "live.jsonl"
    source = TraceSource.follow(path, poll=0.01, interval=0.01)
    seen = Recorder(source)
    source.start()
    try:
        wait_for(lambda: source.state.phase is Phase.WAITING and "to appear" in source_line(source.state))
        path.write_bytes(lines[0][:30])  # half a header
        wait_for(lambda: "waiting for the header record" in source_line(source.state))
        with path.open("ab") as f:
            f.write(lines[0][30:] + lines[1] + lines[2][:25])  # ... a step and a torn one
        wait_for(lambda: seen.steps == 1)
        assert source.state.phase is Phase.FOLLOWING
        with path.open("ab") as f:
            f.write(lines[2][25:] + b"".join(lines[3:5]))
        wait_for(lambda: seen.steps == 4)
        with path.open("ab") as f:
            f.write(b"".join(lines[5:]))
        wait_for(lambda: seen.steps == 7)
        assert seen.last is not None and same(seen.last, load(ADDITIVE)) and seen.errors == []
        versions = [v for _, v in seen.updates]
        assert versions == list(range(1, len(versions) + 1))
        path.write_bytes(lines[0] + lines[1])  # rewritten shorter: a new run, read from the start
        wait_for(lambda: seen.steps == 1)
        assert source_line(source.state) == "following live.jsonl: 1 steps"
    finally:
        source.close()


def test_a_fast_growing_file_is_snapshotted_at_the_rate_limit(tmp_path: Path) -> None:
    """Appends every few ms for a second: snapshots come at most every `interval`."""
    body = tiled(400).splitlines(keepends=True)
    path = tmp_path / "fast.jsonl"
    path.write_bytes(body[0])
    source = TraceSource.follow(path, poll=0.005, interval=0.2)
    seen = Recorder(source)
    source.start()
    try:
        start = time.monotonic()
        with path.open("ab") as f:
            for line in body[1:]:
                f.write(line)
                f.flush()
                time.sleep(0.0025)
        elapsed = time.monotonic() - start
        wait_for(lambda: seen.steps == 400)
        assert len(seen.updates) <= elapsed / 0.2 + 3, (len(seen.updates), elapsed)
    finally:
        source.close()


def test_a_followed_file_with_a_bad_header_is_reported_then_read_once_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    path.write_bytes(b'{"kind":"header","schema":"9.0","config":{}}\n')
    source = TraceSource.follow(path, poll=0.01, interval=0.01)
    seen = Recorder(source)
    source.start()
    try:
        wait_for(lambda: seen.errors)
        assert isinstance(seen.errors[0], TraceHeaderError) and "newer" in str(seen.errors[0])
        time.sleep(0.1)
        assert len(seen.errors) == 1  # the same bad file is not read again
        path.write_bytes(b"".join(sample_lines()))
        wait_for(lambda: seen.steps == 7)
    finally:
        source.close()


# -- a live stream -----------------------------------------------------------------------------
@pytest.fixture
def servers() -> Any:
    made: list[StreamServer] = []
    yield made
    for server in made:
        server.close()


def test_a_stream_with_a_wrong_token_is_unauthorised(servers: list[StreamServer]) -> None:
    hub = StreamHub()
    hub.publish(records(sample_lines()[:3]))
    servers.append(StreamServer(hub, "127.0.0.1", 0, token="s3cret", heartbeat=0.1))
    source = TraceSource.stream(servers[0].url, token="wrong", **FAST)
    seen = Recorder(source)
    assert source.start().join(10)  # nothing more can come: the source ends by itself
    assert seen.phases()[-1] is Phase.UNAUTHORISED and source.state.problem and seen.updates == []
    assert source_line(source.state).startswith("unauthorised: HTTP 401")
    right = TraceSource.stream(servers[0].url, token="s3cret", **FAST)
    seen_right = Recorder(right)
    right.start()
    try:
        wait_for(lambda: seen_right.steps == 2)
    finally:
        right.close()


def test_a_stream_reconnects_and_the_save_tee_equals_the_servers_file(
    tmp_path: Path, servers: list[StreamServer]
) -> None:
    """The recorder's file, published line by line: what the viewer is shown and what --save
    wrote are that file, across a forced reconnect (the server resends its header)."""
    lines = sample_lines()
    hub = StreamHub()
    servers.append(StreamServer(hub, "127.0.0.1", 0, heartbeat=0.1))
    save = tmp_path / "copy.jsonl"
    source = TraceSource.stream(servers[0].url, save=save, interval=0.02, **FAST)
    seen = Recorder(source)
    source.start()
    try:
        hub.publish(records(lines[:4]))
        wait_for(lambda: seen.steps == 3)
        hub.disconnect_all()
        hub.publish(records(lines[4:6]))  # while the viewer is away
        wait_for(lambda: source.follower is not None and source.follower.reconnects == 1)
        hub.publish(records(lines[6:]))
        wait_for(lambda: seen.steps == 7 and source.state.phase is Phase.IDLE)
        assert save.read_bytes() == ADDITIVE.read_bytes()
        assert seen.last is not None and same(seen.last, load(ADDITIVE)) and seen.last.path == str(save)
        assert Phase.CONNECTING in seen.phases() and Phase.LIVE in seen.phases()
        assert source_line(source.state).startswith("idle since ") and source.state.mode is Mode.STREAM
        servers[0].close()  # the run wrote its footer, then the server went away: ended, not connecting
        wait_for(lambda: source.state.phase is Phase.ENDED)
        assert (
            source_line(source.state) == "ended: the run wrote its footer · last step 7 · saved to copy.jsonl"
        )
    finally:
        source.close()


def test_a_stream_gap_is_shown_as_a_gap(servers: list[StreamServer]) -> None:
    """Cut off for falling behind while the steps it missed left the server's backlog."""
    lines = tiled(12).splitlines(keepends=True)
    hub = StreamHub(backlog=6, viewer_queue=8)
    hub.publish(records(lines[:3]))
    servers.append(StreamServer(hub, "127.0.0.1", 0, heartbeat=0.1))
    source = TraceSource.stream(servers[0].url, interval=0.02, **FAST)
    seen = Recorder(source)
    source.start()
    try:
        wait_for(lambda: seen.steps == 2)
        hub.publish(records(lines[3:]))  # ten steps at once: over the viewer's queue, it is cut off
        wait_for(lambda: seen.last is not None and seen.last.columns["step"][-1] == 12)
        assert seen.last is not None and seen.last.gaps == [(2, 7)] and source.state.gaps == 1
        assert list(seen.last.columns["step"]) == [1, 2, *range(7, 13)]
        assert source.state.phase is Phase.GAP  # held a few seconds, so a viewer sees it
        assert source_line(source.state).startswith("gap: steps 3..6 missing")
    finally:
        source.close()


def test_stopping_a_stream_source_ends_its_connection_at_once(servers: list[StreamServer]) -> None:
    """A silent server (no record, heartbeats 60 s apart): stop() ends the connection being
    read instead of waiting for the next line or the read timeout."""
    hub = StreamHub()
    hub.publish(records(sample_lines()[:3]))
    servers.append(StreamServer(hub, "127.0.0.1", 0, heartbeat=60.0))
    source = TraceSource.stream(servers[0].url, timeout=60.0, interval=0.02)
    seen = Recorder(source)
    source.start()
    wait_for(lambda: seen.steps == 2 and source.state.phase is Phase.LIVE)
    t0 = time.monotonic()
    source.stop()
    assert not source.alive and time.monotonic() - t0 < 2.0
    source.close()


def test_the_source_line_words_the_facts_a_source_keeps() -> None:
    """A source keeps facts (what it waits for, the last gap, whether the footer came);
    tracer.render.source words them, pinned from the words the source made itself before."""
    from tracer.trace.attach import LinkState
    from tracer.trace.source import FILE, HEADER

    waiting = SourceState(Mode.FOLLOW, Phase.WAITING, "./runs/t.jsonl", waiting=FILE)
    assert source_line(waiting) == "waiting for runs/t.jsonl to appear"
    header = SourceState(Mode.FOLLOW, Phase.WAITING, "t.jsonl", waiting=HEADER)
    assert source_line(header) == "waiting for the header record of t.jsonl"
    url = "http://127.0.0.1:1/trace"
    link = LinkState(url, "live", last_step=9)
    gap = SourceState(Mode.STREAM, Phase.GAP, url, link=link, gap=(3, 6, "not received"), gaps=1)
    assert source_line(gap) == "gap: steps 3..6 missing (not received) · live · step 9"
    ended = SourceState(Mode.STREAM, Phase.ENDED, url, link=link, footer=True)
    assert source_line(ended) == "ended: the run wrote its footer · last step 9"
    cut = SourceState(Mode.STREAM, Phase.ENDED, url, link=LinkState(url, "gave up", "limit", 9, reconnects=2))
    assert source_line(cut) == "ended: gave up after 2 reconnects (limit) · last step 9"


def test_a_gap_without_a_reason_is_a_fact_render_words() -> None:
    """A stream's gap record that gives no reason leaves the source's Gap without one (a
    fact); render.source says "not received"; a record's own reason is shown as it came."""
    from tracer.trace.attach import LinkState
    from tracer.trace.source import Gap, Waiting

    url = "http://127.0.0.1:1/trace"
    link = LinkState(url, "live", last_step=9)
    bare = SourceState(Mode.STREAM, Phase.GAP, url, link=link, gap=Gap(3, 6, None), gaps=1)
    assert source_line(bare) == "gap: steps 3..6 missing (not received) · live · step 9"
    told = SourceState(Mode.STREAM, Phase.GAP, url, link=link, gap=Gap(3, 6, "left the server's backlog"))
    assert source_line(told) == "gap: steps 3..6 missing (left the server's backlog) · live · step 9"
    assert SourceState(Mode.FOLLOW, Phase.FOLLOWING, "t.jsonl").waiting is None
    assert {w.value for w in Waiting} == {"file", "header"}
