"""The step pass and the request index from entry columns (tracer.analysis.entry_features) against
the record-by-record reference, exactly: on every sample trace, a generated 256-running trace,
the same traces rewritten in the 1.1 layout and down the reader's general path, and records
made to test the corners (a request named twice in one step, a dict `sampled` naming requests
the step did not schedule, `sampled` unknown, a finish in the admission step).

The entry columns themselves: the reader's fast and general paths and a re-scan of the
records collect the same; a sidecar keeps them and a re-open maps them.
"""

from __future__ import annotations

import itertools
import mmap
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tests.test_derived import assert_same_pass
from tracer.analysis import entry_features, requests, step_features
from tracer.trace import compact, sidecar
from tracer.trace.entries import HAND_BACK_PIECES, Entries
from tracer.trace.reader import load
from tracer.trace.trace_type import WHILE_PARSING, Trace, entries_of

SAMPLES = sorted((ROOT / "sample_traces").glob("*.jsonl"))


def assert_equals_reference(trace: Trace) -> None:
    """The NumPy pass and index equal the reference on `trace`, and were computed from columns."""
    assert entries_of(trace) is not None, trace.path
    assert entry_features.computed(trace) is not None
    assert_same_pass(step_features._run(trace), step_features.reference(trace))
    got, want = requests._build(trace), requests.reference(trace)
    assert list(got.events.items()) == list(want.events.items())
    assert list(got.since.items()) == list(want.since.items())


def assert_same_entries(a: Entries, b: Entries) -> None:
    assert a.ids == b.ids
    for name in a.steps:
        np.testing.assert_array_equal(a.steps[name], b.steps[name], err_msg=name)
    np.testing.assert_array_equal(a.ctx, b.ctx)
    for name in a.sched:
        np.testing.assert_array_equal(a.sched[name], b.sched[name], err_msg=name)
    for name in a.items:
        np.testing.assert_array_equal(a.items[name], b.items[name], err_msg=name)
    for name in ("wait", "pre", "fin", "arr", "arr_t"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated busy server: 256 running, arrivals every step, preemptions."""
    out = tmp_path_factory.mktemp("busy") / "busy.jsonl"
    args = ["--steps", "400", "--seed", "7", "--max-running", "256", "--arrival-rate", "3"]
    args += ["--kv-blocks", "8000", "--budget", "8192"]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args], check=True)
    return out


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_traces(path: Path) -> None:
    assert_equals_reference(load(path, entries=True))


def test_a_generated_256_running_trace(busy: Path) -> None:
    trace = load(busy, entries=True)
    assert trace.columns["num_running"].max() == 256 and trace.columns["n_preempted"].sum() > 0
    assert trace.columns["n_resumed"].sum() > 0
    assert_equals_reference(trace)


def test_chunks_of_one_step(busy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step a chunk of its own: each request's run, reset, sample count and pending
    admission carried across every boundary."""
    monkeypatch.setattr(entry_features, "CHUNK", 97)
    assert_equals_reference(load(busy, entries=True))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_chunks_of_a_few_steps_on_the_samples(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry_features, "CHUNK", 5)
    assert_equals_reference(load(path, entries=True))


def test_spans_and_takes_across_pieces() -> None:
    """A recording index's columns come in pieces (one per segment): read across their seams."""
    whole = np.arange(40, dtype=np.int32)
    pieces = [whole[:7], whole[7:7], whole[7:20], whole[20:]]
    e = Entries(ids=[], steps={}, ctx=np.zeros(0, np.int64), per_entry={"wait": list(pieces)})
    for lo, hi in [(0, 40), (0, 7), (5, 9), (7, 20), (19, 21), (20, 40), (3, 3), (39, 40)]:
        np.testing.assert_array_equal(e.span("wait", lo, hi), whole[lo:hi])
    at = np.array([0, 6, 7, 8, 19, 20, 39])
    np.testing.assert_array_equal(e.take("wait", at), whole[at])


def test_takes_over_many_mapped_pieces(tmp_path: Path) -> None:
    """Picks spread over more pieces than a hand-back covers, from a mapped file as a
    recording index's are: the pages handed back on the way are read again, not lost."""
    whole = np.arange(1 << 16, dtype=np.int32)
    (tmp_path / "col").write_bytes(whole.tobytes())
    with open(tmp_path / "col", "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    cuts = [0, 0, 100, 4096, 4096, 9000, *range(10_000, 1 << 16, 1500), 1 << 16]
    pieces = [np.frombuffer(data, np.int32, count=b - a, offset=4 * a) for a, b in itertools.pairwise(cuts)]
    assert len(pieces) > 3 * HAND_BACK_PIECES
    e = Entries(ids=[], steps={}, ctx=np.zeros(0, np.int64), per_entry={"wait": pieces})
    rng = np.random.default_rng(3)
    for size in (0, 1, 50, 5000, 1 << 16):
        at = np.sort(rng.choice(1 << 16, size, replace=False))
        np.testing.assert_array_equal(e.take("wait", at), whole[at])
        np.testing.assert_array_equal(e.take("wait", at), whole[at])  # after the hand-backs


def _rewrite(src: Path, out: Path, change: Any) -> Path:
    lines = []
    for line in src.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec.get("kind") == "step":
            rec = change(rec)
        lines.append(orjson.dumps(rec))
    out.write_bytes(b"\n".join(lines) + b"\n")
    return out


def _as_11(rec: dict[str, Any]) -> dict[str, Any]:
    return compact.expand(rec)


def _general(rec: dict[str, Any]) -> dict[str, Any]:
    rec.pop("sched_us", None)  # the fast path wants every key: this one goes the general way
    return rec


@pytest.mark.parametrize("change", [_as_11, _general], ids=["1.1 layout", "general path"])
def test_other_layouts_and_the_general_path(busy: Path, tmp_path: Path, change: Any) -> None:
    fast = load(busy, entries=True)
    other = load(_rewrite(busy, tmp_path / "other.jsonl", change), entries=True)
    assert_equals_reference(other)
    assert_same_pass(step_features._run(other), step_features._run(fast))
    if change is _general:  # the same records, the other path: the same columns
        assert_same_entries(other.entries, fast.entries)  # type: ignore[arg-type]


def test_collected_while_parsing_equals_a_rescan(busy: Path) -> None:
    parsed = load(busy, entries=True).entries
    rescanned = entries_of(load(busy))
    assert parsed is not None and rescanned is not None
    assert_same_entries(parsed, rescanned)


def _step(step: int, **kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "kind": "step",
        "step": step,
        "t": step * 0.01,
        "target": {"cap": 64, "used": 0, "left": 64},
        "input": {"cap": 64, "used": 0, "reserved": 0, "left": 64},
    }
    rec.update(kw)
    return rec


def _group(*entries: tuple[str, int, int]) -> dict[str, list[Any]]:
    return {
        "id": [e[0] for e in entries],
        "tokens": [e[1] for e in entries],
        "spec": [e[2] for e in entries],
        "demand": [0 for _ in entries],
    }


def test_corners(tmp_path: Path) -> None:
    header = orjson.loads((ROOT / "sample_traces" / "ngram_preempt.jsonl").read_bytes().splitlines()[0])
    steps = [
        _step(1, new=_group(("a", 8, 0), ("b", 8, 0)), waiting_demand=[["c", 8]], sampled=[0, 1]),
        # "a" twice: the counts of a dict `sampled` keep its last
        _step(2, running=_group(("a", 4, 2), ("b", 3, 2), ("a", 2, 0)), sampled=[2, 3, 1]),
        # a dict naming a request this step did not schedule ("c", still waiting)
        _step(3, running=_group(("a", 3, 2)), sampled={"a": 2, "c": 1}, waiting_demand=[["c", 4]]),
        _step(4, new=_group(("c", 4, 0)), running=_group(("a", 3, 2)), sampled=None, finished=["b"]),
        # admitted and finished in one step, then admitted again
        _step(
            5,
            new=_group(("d", 4, 0)),
            running=_group(("a", 1, 0), ("c", 3, 2)),
            sampled=[0, 1, 2],
            finished=["d"],
        ),
        _step(6, new=_group(("d", 4, 0)), running=_group(("c", 3, 2)), preempted=["a"], sampled=[1, 0]),
        _step(7, resumed=_group(("a", 9, 0)), running=_group(("d", 1, 0), ("c", 1, 0)), sampled=[1, 1, 1]),
        _step(8, running=_group(("a", 1, 0), ("c", 1, 0)), context_tokens=40, sampled=[1, 1], finished=["d"]),
    ]
    path = tmp_path / "corners.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (header, *steps)))
    trace = load(path, entries=True)
    assert len(trace) == 8
    assert_equals_reference(trace)
    index = requests._build(trace)
    assert index.events["d"].prefill_done == 6 and index.events["b"].prefill_done == 1
    # Without the step-8 context: estimated, not recorded.
    assert step_features._run(trace).features.context_recorded is False


@pytest.fixture
def copy_of_busy(busy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Copies of the busy trace, named as asked, whose loads keep a sidecar whatever their size
    (in a cache of this test's own)."""
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def copy(name: str) -> Path:
        path = tmp_path / name
        path.write_bytes(busy.read_bytes())
        return path

    return copy


def test_kept_in_the_sidecar_and_mapped_back(copy_of_busy: Callable[[str], Path]) -> None:
    path = copy_of_busy("t.jsonl")
    first = load(path, entries=True)
    assert first.entries is not None
    again = load(path)  # a load that did not ask: the sidecar's entries are mapped anyway
    assert again.entries is not None
    assert_same_entries(first.entries, again.entries)
    assert_equals_reference(again)

    # A sidecar written without them: a load that asks collects them and rewrites it.
    plain = copy_of_busy("p.jsonl")
    assert load(plain).entries is None
    asked = load(plain, entries=True)
    assert asked.entries is not None
    assert load(plain).entries is not None


def test_collected_while_parsing_only_when_the_load_parses(copy_of_busy: Callable[[str], Path]) -> None:
    """WHILE_PARSING (`why REQUEST`'s load): a load that parses the file collects the entry
    columns on the way; one that maps a sidecar written without them leaves them out and the
    sidecar as it was (a warm file's derived sidecars may make them needless)."""
    fresh = copy_of_busy("f.jsonl")
    parsed = load(fresh, entries=WHILE_PARSING)
    assert parsed.entries is not None
    assert_same_entries(parsed.entries, load(fresh).entries)  # kept in the sidecar too

    warm = copy_of_busy("w.jsonl")
    assert load(warm).entries is None  # its sidecar, written without them
    assert load(warm, entries=WHILE_PARSING).entries is None
    assert load(warm).entries is None  # not rewritten
    assert load(warm, entries=True).entries is not None  # True still collects and keeps them


def test_freed_memory_is_handed_back_through_glibc() -> None:
    """The pass hands freed heap back through glibc's malloc_trim: found where glibc is."""
    import platform

    from tracer.analysis import release_memory

    if platform.libc_ver()[0] == "glibc":
        assert release_memory._TRIM is not None
    release_memory.trim()  # and harmless wherever it is called
