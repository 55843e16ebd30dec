"""Format 1.2's encoding on the recorder's side: `sampled` aligned or not, drafts refs.

The recorder's whole output is checked against golden records (test_recorder_equivalence);
these cases are the branches a real recording seldom takes: a model runner whose requests
come in another order than the scheduled one, or are not exactly the scheduled ones.
"""

from __future__ import annotations

import orjson

from tracer.record.encoder import _aligned
from tracer.trace.builder import TraceBuilder
from tracer.trace.compact import expand

ORDER = ["n1", "r1", "r2"]


def test_sampled_in_the_scheduled_order() -> None:
    assert _aligned(ORDER, ["n1", "r1", "r2"], [0, 2, 1]) == [0, 2, 1]
    # The runner's batch in another order: reordered, still a list.
    assert _aligned(ORDER, ["r2", "n1", "r1"], [1, 0, 2]) == [0, 2, 1]


def test_sampled_for_other_requests_stays_a_dict() -> None:
    assert _aligned(ORDER, ["n1", "r1"], [0, 2]) == {"n1": 0, "r1": 2}  # one scheduled request missing
    assert _aligned(ORDER, ["n1", "r1", "x"], [0, 2, 5]) == {"n1": 0, "r1": 2, "x": 5}  # another one


def _step(sampled: object, step: int = 1) -> dict[str, object]:
    return {
        "kind": "step",
        "step": step,
        "t": 0.0,
        "target": {"cap": 8, "used": 5, "left": 3},
        "input": {"cap": 8, "used": 5, "reserved": 0, "left": 3},
        "query": None,
        "new": {"id": ["n1"], "tokens": [3], "spec": [0], "demand": [3]},
        "resumed": [],
        "running": {"id": ["r1", "r2"], "tokens": [1, 1], "spec": [0, 0], "demand": [1, 1]},
        "preempted": ["r2"],
        "finished": [],
        "sampled": sampled,
        "num_waiting": 0,
        "num_running": 3,
        "sched_us": 1.0,
        "kv_usage": 0.0,
        "inputs": [["d", ["gone", 2, 1], [2, 2, 2]], ["x", ["gone"], "FINISHED_ABORTED"]],
    }


def test_a_dict_sampled_beside_compact_groups_loads() -> None:
    builder = TraceBuilder("t")
    header = b'{"kind":"header","schema":"1.2","config":{}}\n'
    builder.feed(
        header + orjson.dumps(_step({"n1": 0, "x": 4})) + b"\n" + orjson.dumps(_step(None, 2)) + b"\n"
    )
    trace = builder.build()
    assert trace.columns["sampled_tokens"].tolist() == [4, -1]
    assert trace.columns["n_preempted_held"].tolist() == [1, 1]
    assert trace.step(0)["sampled"] == {"n1": 0, "x": 4} and trace.step(1)["sampled"] is None


def test_expand_gives_the_11_record() -> None:
    rec = expand(_step([0, 2, 1]))
    assert rec["new"] == [["n1", 3, 0, 3]] and rec["resumed"] == []
    assert rec["running"] == [["r1", 1, 0, 1], ["r2", 1, 0, 1]]
    assert rec["sampled"] == {"n1": 0, "r1": 2, "r2": 1}
    # Positions name scheduled requests, strings any other; other inputs are untouched.
    assert rec["inputs"] == [["d", ["gone", "r2", "r1"], [2, 2, 2]], ["x", ["gone"], "FINISHED_ABORTED"]]
    v11 = orjson.loads(orjson.dumps(rec))
    assert expand(v11) == rec, "a 1.1 record is returned as it is"
