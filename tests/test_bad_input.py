"""Bad input to the reader: every truncation of a real sample, a gigantic line,
and a property test: any bytes load or raise the reader's own TraceError."""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tracer.trace.reader import TraceBuilder, TraceError, load

SAMPLE = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"


def test_every_truncation_of_a_sample_trace(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    full = load(SAMPLE)
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    step_ends = [
        e for e, line in zip(ends, data.splitlines(), strict=True) if line.startswith(b'{"kind":"step"')
    ]
    cut = tmp_path / "cut.jsonl"
    for n in range(len(data) + 1):
        cut.write_bytes(data[:n])
        try:
            trace = load(cut)
        except TraceError as exc:
            assert n < ends[0], f"only a missing header may fail, not a cut at byte {n}: {exc}"
            continue
        whole = sum(1 for e in step_ends if e - 1 <= n)
        assert len(trace) == whole, n
        assert list(trace.columns["target_used"]) == list(full.columns["target_used"][:whole])


def test_a_gigantic_line_is_a_clean_error(tmp_path: Path) -> None:
    header = orjson.dumps({"kind": "header", "schema": "1.0", "config": {}})
    path = tmp_path / "big.jsonl"
    path.write_bytes(header + b"\n" + b'{"kind":"step","junk":"' + b"x" * (64 << 20) + b"\n")
    try:
        load(path)
    except TraceError as exc:
        assert exc.line == 2 and "not a JSON record" in str(exc)
    else:
        raise AssertionError("a 64 MiB garbage line must not load")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_any_bytes_load_or_raise_trace_error(data: bytes) -> None:
    builder = TraceBuilder("fuzz")
    try:
        builder.feed(data)
        torn = builder.finish()
        builder.build(torn)
    except TraceError:
        pass


NASTY = [
    b'{"kind":"gap","after":"a"}',
    b'{"kind":"runner","step":1,"pass":"draft","rows":3,"cap":"c"}',
    b'{"kind":"step","step":2,"t":0,"target":5,"input":[]}',
    b'{"kind":"step","step":4,"t":0,"target":{"cap":1,"used":1,"left":0},"input":{"cap":1,"used":1,"left":0},'
    b'"query":5,"preempted":7,"sampled":{"a":"b"},"new":[[1,"x"]],"num_waiting":"w"}',
    b'{"kind":"step","step":5,"t":0,"target":{"cap":1,"used":1,"left":0},"input":{"cap":1,"used":1,"left":0},'
    b'"running":[["a",1,"s"]],"kv_usage":"k"}',
    b'{"kind":"step","step":6,"t":0,"target":{"cap":1,"used":1,"left":0},"input":{"cap":1,"used":1,"left":0},'
    b'"sampled":{"a":"b"}}',
]


def test_each_nasty_record_is_a_trace_error_and_loses_nothing() -> None:
    header = b'{"kind":"header","schema":"1.0","config":{}}\n'
    good = (
        b'{"kind":"step","step":1,"t":0,"target":{"cap":1,"used":1,"left":0},'
        b'"input":{"cap":1,"used":1,"left":0}}'
    )
    for rec in NASTY:
        strict = TraceBuilder("nasty")
        try:
            strict.feed(header + good + b"\n" + rec + b"\n")
        except TraceError as exc:
            assert exc.line == 3, rec
        else:
            raise AssertionError(f"accepted {rec!r}")
        lenient = TraceBuilder("nasty", strict=False)
        lenient.feed(header + good + b"\n" + rec + b"\n" + good + b"\n")
        trace = lenient.build(lenient.finish())
        assert len(trace) == 2 and len(trace.problems) == 1, rec
        assert all(len(v) == 2 for v in trace.columns.values())


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                b'{"kind":"header","schema":"1.0","config":{}}',
                b'{"kind":"step","step":1,"t":0,"target":{"cap":1,"used":1,"left":0},"input":{"cap":1,"used":1,"left":0}}',
                b'{"kind":"step","step":"x"}',
                b'{"kind":"runner","step":1,"pass":"target","rows":"?"}',
                b"[]",
                b"{}",
                b'{"kind":"footer"}',
                b'{"kind":"header","schema":"9.0","config":{}}',
                b"\xff",
                b"",
            ]
        ),
        max_size=12,
    ),
    st.integers(0, 200),
)
def test_mixed_records_load_or_raise_trace_error(lines: list[bytes], cut: int) -> None:
    data = b"\n".join(lines)
    for strict in (True, False):
        builder = TraceBuilder("fuzz", strict=strict)
        try:
            builder.feed(data[: len(data) - cut] if cut < len(data) else data)
            builder.build(builder.finish())
        except TraceError:
            pass
