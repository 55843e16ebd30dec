"""Bad input to the reader: every truncation of a real sample, a gigantic line,
and a property test: any bytes load or raise the reader's own TraceError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tracer.trace.builder import TraceBuilder
from tracer.trace.errors import TraceError
from tracer.trace.reader import load

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
    later = good.replace(b'"step":1', b'"step":9')  # after every nasty one: the order holds
    for rec in NASTY:
        strict = TraceBuilder("nasty")
        try:
            strict.feed(header + good + b"\n" + rec + b"\n")
        except TraceError as exc:
            assert exc.line == 3, rec
        else:
            raise AssertionError(f"accepted {rec!r}")
        lenient = TraceBuilder("nasty", strict=False)
        lenient.feed(header + good + b"\n" + rec + b"\n" + later + b"\n")
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


# -- format 1.2's compact groups ------------------------------------------------------------
HEADER_12 = b'{"kind":"header","schema":"1.2","config":{}}\n'


def _step_12(**over: object) -> dict[str, object]:
    """A well-formed 1.2 step: two running requests, one new, the drafts of the last step."""
    rec: dict[str, object] = {
        "kind": "step",
        "step": 2,
        "t": 0.5,
        "target": {"cap": 16, "used": 9, "left": 7},
        "input": {"cap": 16, "used": 9, "reserved": 0, "left": 7},
        "new": {"id": ["c"], "tokens": [5], "spec": [0], "demand": [5]},
        "resumed": [],
        "running": {"id": ["a", "b"], "tokens": [2, 2], "spec": [1, 1], "demand": [2, 2]},
        "preempted": [],
        "finished": [],
        "sampled": [0, 2, 1],
        "inputs": [["u", 1], ["d", [1, 2, "gone"], [1, 1, 1]]],
        "query": None,
        "num_waiting": 0,
        "num_running": 3,
        "sched_us": 10.0,
        "kv_usage": 0.1,
    }
    rec.update(over)
    return rec


BAD_12 = {
    "running.tokens": {"running": {"id": ["a", "b"], "tokens": [2], "spec": [1, 1], "demand": [2, 2]}},
    "running.spec": {"running": {"id": ["a", "b"], "tokens": [2, 2], "spec": [1, "x"], "demand": [2, 2]}},
    "running.demand": {"running": {"id": ["a", "b"], "tokens": [2, 2], "spec": [1, 1]}},
    "running.id": {"running": {"id": "ab", "tokens": [2, 2], "spec": [1, 1], "demand": [2, 2]}},
    "new.tokens": {"new": {"id": ["c"], "tokens": [5.0], "spec": [0], "demand": [5]}},
    "sampled": {"sampled": [0, 2]},
    "inputs": {"inputs": [["u", 1], ["d", [1, 3], [1, 1]]]},
}


class _Counting(TraceBuilder):
    """A builder that counts the steps its general path read."""

    general = 0

    def _add_step(self, *args: Any) -> None:
        self.general += 1
        super()._add_step(*args)


def test_a_good_compact_step_loads_in_both_paths_as_11() -> None:
    fast = _Counting("good")
    fast.feed(HEADER_12 + orjson.dumps(_step_12()) + b"\n")
    general = _Counting("good")
    slow = _step_12()
    del slow["kv_usage"]  # a key the fast path needs: the general path reads this one
    general.feed(HEADER_12 + orjson.dumps(slow) + b"\n")
    assert (fast.general, general.general) == (0, 1)
    for builder in (fast, general):
        trace = builder.build()
        cols = {k: int(v[0]) for k, v in trace.columns.items() if k in ("n_new", "n_running", "spec_tokens")}
        assert cols == {"n_new": 1, "n_running": 2, "spec_tokens": 2}
        assert int(trace.columns["sampled_tokens"][0]) == 3 and int(trace.columns["new_tokens"][0]) == 5
        rec = trace.step(0)
        assert rec["new"] == [["c", 5, 0, 5]] and rec["running"] == [["a", 2, 1, 2], ["b", 2, 1, 2]]
        assert rec["sampled"] == {"c": 0, "a": 2, "b": 1}
        assert rec["inputs"] == [["u", 1], ["d", ["a", "b", "gone"], [1, 1, 1]]]


def test_each_bad_compact_field_is_named_with_its_line() -> None:
    good = orjson.dumps(_step_12(step=1)) + b"\n"
    for field, over in BAD_12.items():
        bad = orjson.dumps(_step_12(**over)) + b"\n"
        strict = _Counting("compact.jsonl")
        try:
            strict.feed(HEADER_12 + good + bad)
        except TraceError as exc:
            assert (exc.line, exc.field) == (3, field), (field, str(exc))
            assert str(exc).startswith(f"compact.jsonl:3: field '{field}': "), str(exc)
            assert strict.general == 1, "the good step took the fast path, the bad one the general"
        else:
            raise AssertionError(f"accepted a bad {field}")
        lenient = TraceBuilder("compact.jsonl", strict=False)
        lenient.feed(HEADER_12 + good + bad + orjson.dumps(_step_12(step=3)) + b"\n")
        trace = lenient.build(lenient.finish())
        assert len(trace) == 2 and [p.field for p in trace.problems] == [field]
        assert [trace.step(i)["running"] for i in range(2)] == [[["a", 2, 1, 2], ["b", 2, 1, 2]]] * 2


def test_unequal_lengths_message() -> None:
    bad = orjson.dumps(_step_12(**BAD_12["running.tokens"])) + b"\n"
    try:
        TraceBuilder("t.jsonl").feed(HEADER_12 + bad)
    except TraceError as exc:
        assert str(exc) == "t.jsonl:2: field 'running.tokens': expected 2 entries (one per id), got 1"
    else:
        raise AssertionError("unequal arrays must not load")


def test_every_truncation_of_a_compact_trace(tmp_path: Path) -> None:
    lines = [HEADER_12] + [orjson.dumps(_step_12(step=i)) + b"\n" for i in range(1, 6)]
    data = b"".join(lines)
    ends = [sum(map(len, lines[: k + 1])) for k in range(len(lines))]
    cut = tmp_path / "cut.jsonl"
    for n in range(ends[0], len(data) + 1):
        cut.write_bytes(data[:n])
        trace = load(cut)
        whole = sum(1 for e in ends[1:] if e - 1 <= n)  # a line missing only its newline is whole
        assert len(trace) == whole, n
        assert [trace.step(i)["sampled"] for i in range(whole)] == [{"c": 0, "a": 2, "b": 1}] * whole
        assert (trace.torn is None) == (n in ends or n + 1 in ends), n
