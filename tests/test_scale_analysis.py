"""The fast paths for big traces against the reference code they replace.

- `budget.analyze` replays its candidate steps together in NumPy (`simulate_many`); every
  figure must equal `simulate_without_excess` on the step's full record, over random steps
  (padding of one-token prompts, unknown demands, preemptions, the admission cap, requests
  named twice, shared-buffer slots) written to a real file in the recorder's layout and in
  another key order.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from tracer.analysis.budget import MethodModel, analyze, simulate_without_excess
from tracer.trace.reader import load

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


@pytest.mark.parametrize("method", sorted(CONFIGS))
@pytest.mark.parametrize("layout", ["recorder", "reordered"])
def test_analyze_equals_the_step_by_step_reference(tmp_path: Path, method: str, layout: str) -> None:
    rng = random.Random(f"{method}-{layout}")
    cfg = {**CONFIGS[method], "max_num_batched_tokens": 64, "max_num_seqs": 16, "max_num_active_seqs": 7}
    steps = [_random_step(rng, n, cfg) for n in range(1, 3001)]
    if layout == "reordered":  # another writer's key order: each record is parsed whole
        steps = [dict(reversed(list(s.items()))) for s in steps]
    path = tmp_path / "random.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [{**HEADER, "config": cfg}, *steps]))
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
