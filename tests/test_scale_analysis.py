"""The fast paths for big traces against the reference code they replace.

- `budget.analyze` replays its candidate steps together in NumPy (`simulate_many`); every
  figure must equal `simulate_without_excess` on the step's full record, over random steps
  (padding of one-token prompts, unknown demands, preemptions, the admission cap, requests
  named twice, shared-buffer slots) written to a real file in the recorder's layout and in
  another key order.
- `requests.request_events` reads only a few keys of each record; its events must equal
  those of `requests.lifetimes`, which parses every record, on the samples and on a busy
  generated trace (and with the index built, `lookup.request_life` still equals it).
"""

from __future__ import annotations

import gc
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tracer.analysis import detail, memo
from tracer.analysis import requests as requests_module
from tracer.analysis.budget import MethodModel, analyze, simulate_without_excess
from tracer.analysis.compare import common_requests, compare
from tracer.analysis.lookup import request_life
from tracer.analysis.requests import RequestEvents, cached_index, lifetimes, request_events, request_index
from tracer.trace import schema
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

HEADER = {"kind": "header", "schema": "1.1", "policy": "stock", "t0": 0.0}
CONFIGS = {
    # separate pass: every draft slot is excess
    "dflash": {
        "spec_method": "dflash",
        "num_speculative_tokens": 3,
        "draft_slots": 3,
        "query_rows_per_req": 4,
    },
    # shared buffer: the slots are needed; excess only where a step reserved more (a fault)
    "draft_model": {"spec_method": "draft_model", "num_speculative_tokens": 2, "draft_slots": 2},
}


def _entry(rng: random.Random, rid: str, k: int) -> list[int | str]:
    demand = rng.choice([-1, 1, 1, 2, 1 + k, rng.randint(1, 40)])
    tokens = rng.randint(0, max(0, demand)) if demand > 0 else rng.randint(0, 3)
    return [rid, tokens, rng.choice([0, 0, k]), demand]


def _random_step(rng: random.Random, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    k, slots = cfg["num_speculative_tokens"], cfg["draft_slots"]
    ids = [f"r{n}-{i}" for i in range(rng.randint(0, 12))]
    rng.shuffle(ids)
    cut = sorted(rng.sample(range(len(ids) + 1), 4)) if len(ids) >= 3 else [0, 0, 0, len(ids)]
    running = [_entry(rng, r, k) for r in ids[: cut[0]]]
    new = [_entry(rng, r, k) for r in ids[cut[0] : cut[1]]]
    resumed = [_entry(rng, r, k) for r in ids[cut[1] : cut[2]]]
    unscheduled = [[r, rng.randint(-1, 9)] for r in ids[cut[2] : cut[3]]]
    waiting = [[r, rng.choice([-1, 1, 1, rng.randint(1, 30)])] for r in ids[cut[3] :]]
    if running and rng.random() < 0.05:  # a request named twice: the reference's dicts decide
        new.append(list(running[0]))
    every = running + new + resumed
    used = sum(e[1] for e in every)
    reserved = len(every) * slots + (rng.randint(1, 4) if cfg["spec_method"] == "draft_model" else 0)
    input_used = used + reserved
    target_cap = used + rng.randint(1, 12)
    input_cap = input_used + rng.randint(0, slots)
    preempted = [running[-1][0]] if running and rng.random() < 0.15 else []
    return {
        "kind": "step",
        "step": n,
        "t": float(n),
        "sched_us": 1.0,
        "target": {"cap": target_cap, "used": used, "left": target_cap - used},
        "input": {"cap": input_cap, "used": input_used, "reserved": reserved, "left": input_cap - input_used},
        "query": None,
        "new": new,
        "resumed": resumed,
        "running": running,
        "preempted": preempted,
        "finished": [],
        "unscheduled": unscheduled,
        "waiting_demand": waiting,
        "waiting_demand_truncated": 0,
        "priority": None,
        "num_waiting": len(waiting),
        "num_running": len(running),
        "kv_usage": 0.0,
        "sampled": None,
    }


def _compact(record: dict[str, Any]) -> dict[str, Any]:
    """A 1.1 step record in format 1.2's layout: each request group as parallel arrays."""
    out = dict(record)
    for key in ("new", "resumed", "running"):
        if record[key]:
            ids, tokens, spec, demand = map(list, zip(*record[key], strict=True))
            out[key] = {"id": ids, "tokens": tokens, "spec": spec, "demand": demand}
    return out


@pytest.mark.parametrize("method", sorted(CONFIGS))
@pytest.mark.parametrize("layout", ["recorder", "reordered", "compact"])
def test_analyze_equals_the_step_by_step_reference(tmp_path: Path, method: str, layout: str) -> None:
    rng = random.Random(f"{method}-{layout}")
    cfg = {**CONFIGS[method], "max_num_batched_tokens": 64, "max_num_seqs": 16, "max_num_active_seqs": 7}
    steps = [_random_step(rng, n, cfg) for n in range(1, 3001)]
    if layout == "reordered":  # another writer's key order: each record is parsed whole
        steps = [dict(reversed(list(s.items()))) for s in steps]
    header = {**HEADER, "config": cfg}
    if layout == "compact":  # format 1.2: groups as parallel arrays
        steps, header = [_compact(s) for s in steps], {**header, "schema": "1.2"}
    path = tmp_path / "random.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [header, *steps]))
    trace = load(path)
    analysis = analyze(trace)
    model = MethodModel.from_config(trace.config)
    candidates = (
        (analysis.excess > 0)
        & (trace.columns["input_left"] <= model.draft_slots)
        & (trace.columns["target_left"] > 0)
    )
    assert candidates.sum() > 2000  # the generator makes steps the replay must look at
    withheld = exact_bounds = 0
    for i in range(len(trace)):
        if not candidates[i]:
            assert analysis.withheld[i] == 0 and analysis.exact[i]
            continue
        ref = simulate_without_excess(trace.step(i), trace.config, model)
        assert (int(analysis.withheld[i]), bool(analysis.exact[i])) == (ref.tokens, ref.exact), i
        withheld += ref.tokens > 0
        exact_bounds += not ref.exact
    assert withheld > 100 and exact_bounds > 20  # both kinds of figure were compared


# -- the request index ---------------------------------------------------------------------
SAMPLES = sorted((ROOT / "sample_traces").glob("*.jsonl"))
EVENT_FIELDS = ("admitted", "finished", "preempted", "resumed")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/gen_trace.py's busy server (the Recorder's own records): arrivals, chunked
    prefills, preemptions and resumptions; and the same records in another key order."""
    out = tmp_path_factory.mktemp("gen") / "gen.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gen_trace.py"),
            str(out),
            "--steps",
            "3000",
            "--seed",
            "3",
            "--arrival-rate",
            "0.3",
            "--kv-blocks",
            "200",
        ],
        check=True,
        capture_output=True,
    )
    return out


def _reordered(path: Path, tmp_path: Path) -> Path:
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines() if line]
    out = tmp_path / f"reordered-{path.name}"
    body = (orjson.dumps(dict(reversed(list(r.items()))) if r["kind"] == "step" else r) for r in lines)
    out.write_bytes(b"\n".join(body) + b"\n")
    return out


def _assert_events_equal_lifetimes(trace: Trace) -> None:
    events, lives = request_events(trace), lifetimes(trace)
    for rid, life in lives.items():
        touched = life.admitted is not None or life.finished is not None or life.preempted or life.resumed
        assert (rid in events) == bool(touched), rid
        if rid in events:
            ev = events[rid]
            assert [getattr(ev, f) for f in EVENT_FIELDS] == [getattr(life, f) for f in EVENT_FIELDS], rid
            if life.admitted is not None:
                assert (ev.prefill_done, ev.prefill_steps) == (life.prefill_done, life.prefill_steps), rid
    assert set(events) <= set(lives)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_request_events_equal_the_lifetimes_on_the_samples(path: Path) -> None:
    _assert_events_equal_lifetimes(load(path))


@pytest.mark.parametrize("layout", ["recorder", "reordered"])
def test_request_events_equal_the_lifetimes_on_a_busy_trace(
    generated: Path, tmp_path: Path, layout: str
) -> None:
    trace = load(generated if layout == "recorder" else _reordered(generated, tmp_path))
    col = trace.columns
    assert col["n_preempted"].sum() > 0 and col["n_resumed"].sum() > 0 and col["n_new"].sum() > 100
    _assert_events_equal_lifetimes(trace)


def test_request_life_with_the_index_built_equals_the_lifetimes(generated: Path) -> None:
    trace = load(generated)
    lives = lifetimes(trace)
    assert cached_index(trace) is None
    request_index(trace)  # a comparison builds it; the search then starts at the admission
    assert cached_index(trace) is not None
    for rid in list(lives)[::7]:
        assert request_life(trace, rid) == lives[rid]
    assert request_life(trace, "no-such-request") is None


def test_the_index_is_dropped_with_its_trace(generated: Path) -> None:
    """Kept in the trace's memo (tracer.analysis.memo), which goes with the Trace."""
    trace = load(generated)
    request_index(trace)
    key = id(trace)
    assert key in memo._MEMOS and requests_module.cached_index(trace) is not None
    del trace
    gc.collect()
    assert key not in memo._MEMOS


def test_compare_uses_the_events(generated: Path) -> None:
    a, b = load(generated), load(SAMPLES[0])
    c = compare(a, b)
    assert c.a.lives is request_events(a)  # the cached index, not a second pass
    assert all(isinstance(ev, RequestEvents) for ev in c.a.lives.values())


def test_the_same_figures_in_format_1_1_and_1_2(generated: Path, tmp_path: Path) -> None:
    """gen_trace writes the Recorder's format (1.2's compact layout, 1.3's why fields); the same
    steps expanded to 1.1 by Trace.step must give the same request events, budget figures and
    detail records."""
    compact_trace = load(generated)
    assert compact_trace.header["schema"] == schema.SCHEMA_VERSION
    lines = [orjson.loads(line) for line in generated.read_bytes().splitlines() if line]
    expanded = [{**r, "schema": "1.1"} if r["kind"] == "header" else r for r in lines if r["kind"] != "step"]
    expanded[1:1] = [compact_trace.step(i) for i in range(len(compact_trace))]
    legacy_path = tmp_path / "legacy.jsonl"
    legacy_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in expanded))
    legacy = load(legacy_path)
    assert len(legacy) == len(compact_trace) and legacy.step(7) == compact_trace.step(7)
    assert request_events(legacy) == request_events(compact_trace)
    a, b = analyze(legacy), analyze(compact_trace)
    assert (a.withheld == b.withheld).all() and (a.exact == b.exact).all()
    rows = [0, 5, 9, len(legacy) - 1]
    assert [rec for _, rec in detail.records(compact_trace, rows)] == [legacy.step(i) for i in rows]
    region = dict(detail.region(compact_trace, rows, "new", "unscheduled"))
    assert all(region[i]["running"] == legacy.step(i)["running"] for i in rows)


class _Collides:
    """An id whose hash is another's: the hash match must not take it for that one."""

    def __init__(self, name: str, like: str) -> None:
        self.name, self._hash = name, hash(like)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Collides) and other.name == self.name


def _by_dict(a: list[Any], b: list[Any]) -> tuple[list[Any], list[int], list[int]]:
    where = {rid: j for j, rid in enumerate(b)}
    at_a = [i for i, rid in enumerate(a) if rid in where]
    return [a[i] for i in at_a], at_a, [where[a[i]] for i in at_a]


@pytest.mark.parametrize(
    "a, b",
    [
        ([f"cmpl-{i}" for i in range(1000)], [f"cmpl-{i}" for i in range(1000)]),  # equal lists
        (
            [f"cmpl-{i}" for i in range(1000)],
            [f"cmpl-{i}" for i in range(999, 200, -3)],
        ),  # subset, other order
        ([f"r{i}" for i in range(50)] + [7, 8], [8, "r3", "x", 7, "r49"]),  # ints and strings
        ([], ["a"]),
        (["a"], []),
        (["a", "b", "a"], ["a"]),  # A names one twice: both kept, as the dict did
        (["a", "b"], ["b", "a", "b"]),  # B names one twice: the dict kept the last
        (["a", _Collides("p", "a")], ["b", _Collides("q", "a")]),  # a false hash match
        (["a", "c"], [_Collides("q", "a"), "a", "c"]),  # a hash shared within B
    ],
)
def test_common_requests_agree_with_a_dict(a: list[Any], b: list[Any]) -> None:
    common, (at_a, at_b) = common_requests(a, b)
    want, want_a, want_b = _by_dict(a, b)
    assert common == want and at_a.tolist() == want_a and at_b.tolist() == want_b
    assert at_a.dtype == at_b.dtype == np.int64
