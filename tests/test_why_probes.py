"""The reasons of tracer.analysis.why, proven on vLLM's real Scheduler (issue 19, item 5).

Each scenario makes one constraint bind. It is recorded with the tracing scheduler,
analysed with tracer.analysis.why, and replayed exactly (tracer.whatif.probe): right
before each step's schedule(), a deep copy of the scheduler has ONE constraint relaxed
and schedules. For every waiting or clipped request whose reason is exact (or derived):

- relaxing the named constraint admits it (more tokens, for a clipped one; for a request
  behind the head of the queue, the head is admitted);
- relaxing any other single constraint does not.

The real schedule() of every probed step still re-makes the record (the copies leave
the original untouched).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tracer.analysis.reasons import DERIVED, EXACT
from tracer.trace.reader import Trace, load
from tracer.whatif.offline import EngineSpec, RequestSpec

pytestmark = pytest.mark.vllm


def _minor() -> str:
    import vllm

    return ".".join(vllm.__version__.split(".")[:2])


@dataclass
class Report:
    """What the probes found on one trace."""

    proven: Counter[str] = field(default_factory=Counter)  # code -> requests proven
    unprobed: Counter[str] = field(default_factory=Counter)  # exact, but nothing to relax
    failures: list[str] = field(default_factory=list)
    # (step, request, code, the constraints binding with it): no single relaxation admits
    cobound: list[tuple[int, str, str, tuple[str, ...]]] = field(default_factory=list)
    steps: int = 0


def check_reasons(trace: Trace, rows: list[int] | None = None) -> Report:
    """Probe every listed step (all by default) and check every exact or derived reason."""
    from tracer.analysis.why import step_why
    from tracer.whatif.probe import RELAXES, co_binding, probe_steps, verdict

    report = Report()
    whys = [step_why(trace, row) for row in (range(len(trace)) if rows is None else rows)]
    targets = {
        w.step: [r for r in w.requests if r.cause.certainty in (EXACT, DERIVED)]
        for w in whys
        if any(r.cause.certainty in (EXACT, DERIVED) for r in w.requests)
    }
    probes = probe_steps(trace, targets)
    report.steps = len(probes)
    failed: list[tuple[Any, Any, tuple[str, int] | None, Any]] = []
    for w in whys:
        held = targets.get(w.step, [])
        # schedule()'s order: the running loop's clips, then the waiting queue.
        order = [r for r in held if r.state != "waiting"] + [r for r in held if r.state == "waiting"]
        leads: dict[str, tuple[str, int]] = {}
        for r in order:
            if r.cause.code != "behind":
                leads.setdefault(r.cause.code, (r.id, r.tokens if r.state == "clipped" else 0))
        for r in order:
            code = r.cause.root
            if code not in RELAXES:
                report.unprobed[code] += 1
                continue
            have = r.tokens if r.state == "clipped" else 0
            lead = (r.cause.behind, 0) if r.cause.code == "behind" and r.cause.behind else leads.get(code)
            v = verdict(probes[w.step], code, r.id, have, lead=lead)
            if not v.own:
                report.unprobed[code] += 1
            elif v.proven:
                kind = (
                    ""
                    if lead is None or lead[0] == r.id
                    else ("behind:" if r.cause.code == "behind" else "after:")
                )
                report.proven[f"{kind}{code}"] += 1
            else:
                failed.append((w, r, lead, v))
    # Where the reason's own relaxation does not admit alone: which constraint binds with it.
    pairs = probe_steps(trace, sorted({w.step for w, *_ in failed}), pairs=True) if failed else {}
    for w, r, lead, v in failed:
        target, have = lead or (r.id, r.tokens if r.state == "clipped" else 0)
        with_ = co_binding(pairs[w.step], r.cause.root, target, have)
        # A second constraint binds too: the reason must name it ("also").
        named = {RELAXES[c][0] for c in r.cause.numbers.get("also", ()) if c in RELAXES}
        if v.by is None and not v.others and with_ and named & set(with_):
            report.cobound.append((w.step, r.id, r.cause.root, with_))
            continue
        outcomes = {k: o.scheduled for k, o in probes[w.step].items()}
        report.failures.append(
            f"step {w.step} {r.id} ({r.state}, demand {r.demand}, tokens {r.tokens}): "
            f"reason {r.cause.as_dict()}; lead {lead}; relaxations {v.own} admit: {v.by}; "
            f"others admitting: {v.others}; facts {w.facts}; probes {outcomes}"
        )
    return report


def record(spec: EngineSpec, requests: list[RequestSpec], path: Path, policy: str = "stock") -> Trace:
    from tracer.policies import scheduler_class
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.replay import recording_to

    logging.disable(logging.WARNING)
    try:
        with recording_to(path):
            sched = build_scheduler(spec, scheduler_class(policy))
        run_workload(sched, requests)
        sched.shutdown()
    finally:
        logging.disable(logging.NOTSET)
    return load(path)


def _spread(n: int, prompt: int, out: int, every: int = 1, prefix: str = "r") -> list[RequestSpec]:
    return [
        RequestSpec(f"{prefix}{i}", prompt + (i * 37) % 50, out, arrival_step=1 + i * every) for i in range(n)
    ]


# name -> (engine, requests, the reasons that must be proven, per vLLM minor ("*": any))
SCENARIOS: dict[str, tuple[EngineSpec, list[RequestSpec], dict[str, tuple[str, ...]]]] = {
    "max_num_seqs": (
        EngineSpec(max_num_seqs=4, max_num_batched_tokens=512, num_kv_blocks=2000),
        _spread(12, 40, 12),
        {"*": ("max_num_seqs",)},
    ),
    "kv_pressure": (
        EngineSpec(max_num_seqs=16, max_num_batched_tokens=256, num_kv_blocks=30),
        _spread(10, 60, 40),
        {"*": ("kv_blocks", "preemption")},
    ),
    "target_budget": (
        EngineSpec(max_num_seqs=16, max_num_batched_tokens=64, num_kv_blocks=2000),
        _spread(6, 300, 6, every=2),
        {"*": ("target_budget",)},
    ),
    "dflash": (
        EngineSpec(
            method="dflash",
            num_speculative_tokens=7,
            max_num_batched_tokens=64,
            max_num_seqs=16,
            max_model_len=512,
        ),
        [RequestSpec(f"d{i}", 6, 30) for i in range(12)],
        {"0.32": ("input_budget",), "0.33": ("max_num_active_seqs",)},
    ),
    "dspark_padding": (
        EngineSpec(
            method="dspark",
            num_speculative_tokens=4,
            max_num_batched_tokens=21,
            max_num_seqs=8,
            max_model_len=256,
        ),
        [
            RequestSpec("a", 8, 40),
            RequestSpec("b", 8, 40),
            *(RequestSpec(f"o{i}", 1, 4, arrival_step=4) for i in range(5)),
        ],
        {"*": ("spec_padding",)},
    ),
    "long_prefill": (
        EngineSpec(long_prefill_token_threshold=32, max_num_batched_tokens=256, num_kv_blocks=2000),
        _spread(4, 200, 4),
        {"*": ("long_prefill",)},
    ),
    "chunked_off": (
        EngineSpec(
            enable_chunked_prefill=False, max_num_batched_tokens=160, max_model_len=160, num_kv_blocks=2000
        ),
        _spread(6, 90, 8, every=0),
        {"*": ("chunked_prefill_off",)},
    ),
    "priority_preempt": (
        EngineSpec(
            max_num_batched_tokens=256,
            num_kv_blocks=20,
            scheduling_policy="priority",
            max_model_len=512,
        ),
        [
            RequestSpec(f"p{i}", 40 + (i * 29) % 60, 30, arrival_step=1 + 2 * i, priority=(7 - i) % 4)
            for i in range(8)
        ],
        {"*": ("preemption",)},
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_reason_is_the_one_constraint_that_admits(name: str, tmp_path: Path) -> None:
    spec, requests, expected = SCENARIOS[name]
    trace = record(spec, requests, tmp_path / f"{name}.jsonl")
    report = check_reasons(trace)
    print(name, dict(report.proven), dict(report.unprobed), len(report.failures), report.cobound[:3])
    assert not report.failures, "\n".join(report.failures[:5])
    for code in expected.get(_minor(), expected.get("*", ())):
        assert report.proven[code], f"{name}: no {code} reason was proven: {dict(report.proven)}"
