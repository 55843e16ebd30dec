"""The budget model's "withheld" figure against vLLM's own counterfactual.

For every step where an excess draft-slot reservation could have bound the
budget, the real Scheduler is re-run to just before that step, the excess is
removed (draft slots 0, as the separate-pass methods need), and schedule() is
called once: the target tokens it schedules are what the step would have
scheduled without the excess. A figure marked exact must equal it; an upper
bound must not be below it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tracer.analysis.budget import MethodModel, simulate_without_excess
from tracer.whatif.offline import Driver, EngineSpec, RequestSpec, build_scheduler, make_request
from tracer.whatif.scenarios import SCENARIOS, mixed_accept

pytestmark = pytest.mark.vllm


def _steps(
    spec: EngineSpec, requests: list[RequestSpec], upto: int, *, no_excess_at: int | None
) -> list[Any]:
    """Run `requests` for `upto` steps; at step `no_excess_at` schedule with 0 draft slots."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer.policies import AdditiveMixin, ConfigView

    class Additive(AdditiveMixin, Scheduler):
        """vLLM 0.32's accounting on either release (0.33's stock charges no slots)."""

    sched = build_scheduler(spec, Additive)
    driver = Driver(sched, mixed_accept)
    pending = sorted(requests, key=lambda r: r.arrival_step)
    outs = []
    try:
        while driver.step_index < upto and (sched.has_requests() or pending):
            upcoming = driver.step_index + 1
            while pending and pending[0].arrival_step <= upcoming:
                r = pending.pop(0)
                sched.add_request(
                    make_request(r.id, r.prompt_len, r.max_tokens, arrival_time=float(upcoming))
                )
            if not sched.has_requests():
                driver.step_index += 1
                continue
            if upcoming == no_excess_at:
                cfg = sched.vllm_config
                sched.vllm_config = ConfigView(
                    cfg,
                    speculative_config=ConfigView(cfg.speculative_config, max_num_new_slots_for_drafting=0),
                )
                outs.append(sched.schedule())
                break
            out, _ = driver.step()
            outs.append(out)
    finally:
        sched.shutdown()
    return outs


def _workloads() -> list[tuple[str, EngineSpec, list[RequestSpec]]]:
    cases = [(name, *SCENARIOS[name]) for name in ("dspark_k4", "dflash_k7")]
    # Decoders next to arriving one-token prompts, and prefills next to them.
    spec = EngineSpec(method="dspark", num_speculative_tokens=4, max_num_batched_tokens=24, max_num_seqs=8)
    reqs = [RequestSpec("p", 30, 6), RequestSpec("d", 3, 8)]
    reqs += [RequestSpec(f"o{i}", 1, 3, arrival_step=2 + i % 3) for i in range(6)]
    cases.append(("dspark_mixed", spec, reqs))
    spec = EngineSpec(method="dflash", num_speculative_tokens=3, max_num_batched_tokens=20, max_num_seqs=8)
    reqs = [RequestSpec("d0", 2, 6), RequestSpec("d1", 2, 6)]
    reqs += [RequestSpec(f"o{i}", 1, 4, arrival_step=3) for i in range(4)]
    cases.append(("dflash_ones", spec, reqs))
    return cases


@pytest.mark.parametrize("name,spec,requests", _workloads(), ids=lambda v: v if isinstance(v, str) else "")
def test_withheld_matches_the_real_schedulers_counterfactual(
    name: str, spec: EngineSpec, requests: list[RequestSpec], tmp_path: Any
) -> None:
    from tracer.analysis.budget import analyze
    from tracer.policies import AdditiveScheduler
    from tracer.trace.reader import load
    from tracer.whatif.replay import recording_to

    path = tmp_path / f"{name}.jsonl"
    with recording_to(path):
        sched = build_scheduler(spec, AdditiveScheduler)
    from tracer.whatif.offline import run_workload

    run_workload(sched, requests, accept=mixed_accept)
    sched.shutdown()
    trace = load(path)
    model = MethodModel.from_config(trace.config)
    assert model.draft_slots > 0 and model.separate_pass
    analysis = analyze(trace)
    checked = 0
    for i, rec in enumerate(trace.steps()):
        if not rec["input"]["reserved"]:
            continue
        real = _steps(spec, requests, rec["step"], no_excess_at=rec["step"])[-1].total_num_scheduled_tokens
        result = simulate_without_excess(rec, trace.config, model)
        if result.exact:
            assert result.would_schedule == real, (name, rec["step"], result)
        else:
            assert result.would_schedule >= real, (name, rec["step"], result)
        assert analysis.withheld[i] == (result.tokens if analysis.withheld[i] else 0)
        checked += 1
    assert checked > 0
