"""Scheduling policies as thin layers over vLLM's real Scheduler.

    vllm serve … --scheduler-cls tracer.policies.SeparateScheduler

Policies (draft slots charged per scheduled request; admission cap):
- `additive`: vLLM 0.32's slots (DFlash K, DSpark K-1, P-EAGLE K-1, PARD K,
  draft_model 1); no cap beyond max_num_seqs.
- `cap`: vLLM 0.33's rule: 0 slots for DFlash/DSpark, others as additive;
  admission capped at B // num_lookahead_tokens for DFlash/DSpark.
- `separate`: 0 slots for DFlash/DSpark, whose query rows come from a separate
  query budget, approximated by an admission bound at B // q, q = K+1 (DFlash)
  or K (DSpark); others as additive.
- `draft-budget`: the fork's fix itself (vllm#52996 and its DFlash extension):
  0 slots for DFlash/DSpark, whose q rows per scheduled request come from a
  second per-step budget of B rows that both of `schedule()`'s loops stop on;
  others as additive; no cap beyond max_num_seqs (tracer/draft_budget.py).

Each layer changes two things vLLM reads and nothing else: the draft slots
`schedule()` takes from `speculative_config.max_num_new_slots_for_drafting`
(through a view of the config), and `max_num_active_reqs`, the waiting loop's
admission cap. vLLM's own loop does the rest, preemption restores included.

Where `separate` differs from the fix's contract: vLLM keeps its budgets in
locals of `schedule()`, so a layer cannot keep a per-step query budget. It
bounds admission instead (running ≤ B // q), which guarantees n·q ≤ B for the
n requests scheduled in any step. The two agree whenever every running request
is scheduled in a step; they differ when running requests sit a step out (async
scheduling near max_tokens, pipeline parallelism, an exhausted encoder budget):
there the fork could admit another request and this layer cannot. The query
budget is recorded per step as n·q against B. See docs/policies.md and
tests/test_policies.py::test_separate_bounds_running_not_scheduled.
`draft-budget` is the fork's budget exactly: it runs vLLM's own `schedule()`
with the budget's lines added (tracer/draft_budget.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import vllm
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tracer import draft_budget
from tracer.scheduler import TracingMixin
from tracer.trace.spec_decode_methods import (
    additive_draft_slots,
    is_separate_pass,
    query_rows_of,
    shared_draft_slots,
)


class ConfigView:
    """Read-through view of a vLLM config object with some attributes overridden."""

    def __init__(self, target: Any, **overrides: Any) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_target"), name, value)


class PolicyMixin:
    """Applies a policy's draft slots and admission cap after vLLM builds the scheduler."""

    SCHEDSCOPE_POLICY = "stock"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        vcfg = self.vllm_config  # type: ignore[attr-defined]
        spec = getattr(vcfg, "speculative_config", None)
        if spec is None:
            return
        method = getattr(spec, "method", None)
        k = int(getattr(spec, "num_speculative_tokens", 0) or 0)
        parallel = bool(getattr(spec, "parallel_drafting", False))
        slots, cap = self.policy_budget(vcfg, method, k, parallel)
        self.vllm_config = ConfigView(
            vcfg, speculative_config=ConfigView(spec, max_num_new_slots_for_drafting=slots)
        )
        seqs = int(self.scheduler_config.max_num_seqs)  # type: ignore[attr-defined]
        self.max_num_active_reqs = min(seqs, cap) if cap else seqs

    def policy_budget(self, vcfg: Any, method: str | None, k: int, parallel: bool) -> tuple[int, int | None]:
        """(draft slots per request, admission cap or None)."""
        raise NotImplementedError


class AdditiveMixin(PolicyMixin):
    SCHEDSCOPE_POLICY = "additive"

    def policy_budget(self, vcfg: Any, method: str | None, k: int, parallel: bool) -> tuple[int, int | None]:
        return additive_draft_slots(method, k, parallel), None


class CapMixin(PolicyMixin):
    SCHEDSCOPE_POLICY = "cap"

    def policy_budget(self, vcfg: Any, method: str | None, k: int, parallel: bool) -> tuple[int, int | None]:
        slots = shared_draft_slots(method, k, parallel)
        lookahead = int(getattr(vcfg, "num_lookahead_tokens", 0) or 0)
        if not is_separate_pass(method) or lookahead <= 0:
            return slots, None
        return slots, vcfg.scheduler_config.max_num_batched_tokens // lookahead


class SeparateMixin(PolicyMixin):
    SCHEDSCOPE_POLICY = "separate"

    def policy_budget(self, vcfg: Any, method: str | None, k: int, parallel: bool) -> tuple[int, int | None]:
        slots = shared_draft_slots(method, k, parallel)
        q = query_rows_of(vcfg.speculative_config)
        return slots, (vcfg.scheduler_config.max_num_batched_tokens // q if q else None)


@functools.cache
def _schedule_with_draft_budget() -> Callable[..., Any]:
    return draft_budget.with_draft_budget(Scheduler.schedule, f"vLLM {vllm.__version__}")


class DraftBudgetMixin(PolicyMixin):
    """The fork's separate draft-input budget: vLLM's own schedule() plus its lines."""

    SCHEDSCOPE_POLICY = "draft-budget"
    schedscope_draft_budget = 0  # rows the drafter pass may take in a step (B)
    schedscope_draft_rows = 0  # rows each scheduled request takes from it (q; 0: never binds)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _schedule_with_draft_budget()  # an unsupported vLLM is refused here, by name, not mid-serve
        super().__init__(*args, **kwargs)
        vcfg = self.vllm_config  # type: ignore[attr-defined]
        spec = getattr(vcfg, "speculative_config", None)
        self.schedscope_draft_budget = int(self.scheduler_config.max_num_batched_tokens)  # type: ignore[attr-defined]
        self.schedscope_draft_rows = query_rows_of(spec)

    def policy_budget(self, vcfg: Any, method: str | None, k: int, parallel: bool) -> tuple[int, int | None]:
        return shared_draft_slots(method, k, parallel), None

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        return _schedule_with_draft_budget()(self, *args, **kwargs)


# TracingMixin first: it builds its recorder after the policy has been applied.
class AdditiveScheduler(TracingMixin, AdditiveMixin, Scheduler):
    """vLLM 0.32's additive draft-slot reservation."""


class CapScheduler(TracingMixin, CapMixin, Scheduler):
    """vLLM 0.33's rule: no draft slots for DFlash/DSpark, admission capped."""


class SeparateScheduler(TracingMixin, SeparateMixin, Scheduler):
    """DFlash/DSpark query rows from a separate budget, approximated by an admission bound."""


class DraftBudgetScheduler(TracingMixin, DraftBudgetMixin, Scheduler):
    """The fork's fix: DFlash/DSpark query rows from a per-step draft-input budget."""


class AdditiveAsyncScheduler(TracingMixin, AdditiveMixin, AsyncScheduler):
    pass


class CapAsyncScheduler(TracingMixin, CapMixin, AsyncScheduler):
    pass


class SeparateAsyncScheduler(TracingMixin, SeparateMixin, AsyncScheduler):
    pass


class DraftBudgetAsyncScheduler(TracingMixin, DraftBudgetMixin, AsyncScheduler):
    pass


POLICIES: dict[str, tuple[type, type]] = {
    "additive": (AdditiveScheduler, AdditiveAsyncScheduler),
    "cap": (CapScheduler, CapAsyncScheduler),
    "separate": (SeparateScheduler, SeparateAsyncScheduler),
    "draft-budget": (DraftBudgetScheduler, DraftBudgetAsyncScheduler),
}


def scheduler_class(policy: str, *, async_scheduling: bool = False) -> type:
    """The scheduler class for a policy name ("stock" is vLLM's, traced)."""
    if policy == "stock":
        from tracer.scheduler import TracingAsyncScheduler, TracingScheduler

        return TracingAsyncScheduler if async_scheduling else TracingScheduler
    try:
        sync, asynchronous = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; choose from stock, {', '.join(POLICIES)}") from None
    return asynchronous if async_scheduling else sync
