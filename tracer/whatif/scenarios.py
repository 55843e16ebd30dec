"""Named synthetic workloads for the real scheduler: tests, sample traces and benches share them."""

from __future__ import annotations

from tracer.whatif.offline import EngineSpec, RequestSpec

SCENARIOS: dict[str, tuple[EngineSpec, list[RequestSpec]]] = {
    # The motivating fault: DFlash K=7 on vLLM 0.32 reserves 7 draft slots per
    # request against the 8,192-token input budget, so a 32k prefill advances
    # 8,185 tokens a step and needs a fifth step for the last 28.
    "dflash_k7": (
        EngineSpec(method="dflash", num_speculative_tokens=7, max_num_batched_tokens=8192),
        [RequestSpec("long", 32768, 4)],
    ),
    # DSpark K=4 with a 16-token budget: two 8-token prefills (0.32 schedules 8
    # and 2: the second is clipped by 3 reserved slots), then five one-token
    # requests (q=4 query rows each: at most four fit in 16).
    "dspark_k4": (
        EngineSpec(
            method="dspark",
            num_speculative_tokens=4,
            max_num_batched_tokens=16,
            max_num_seqs=8,
            max_model_len=256,
        ),
        [
            RequestSpec("a", 8, 3),
            RequestSpec("b", 8, 3),
            *(RequestSpec(f"o{i}", 1, 3, arrival_step=4) for i in range(5)),
        ],
    ),
    # ngram with a KV cache small enough to force preemption and resumption.
    "ngram_preempt": (
        EngineSpec(method="ngram", num_speculative_tokens=3, max_num_batched_tokens=256, num_kv_blocks=40),
        [RequestSpec(f"r{i}", 60 + 10 * i, 30) for i in range(6)],
    ),
    # draft_model reserves one slot per request (shared buffer: additive is right).
    "draft_model": (
        EngineSpec(method="draft_model", num_speculative_tokens=2, max_num_batched_tokens=512),
        [RequestSpec(f"d{i}", 200, 12, arrival_step=1 + i) for i in range(5)],
    ),
    # Priority scheduling with a tight KV cache: the high-priority request preempts
    # the low one after the low one was already scheduled in the step, so vLLM
    # restores both budgets for it.
    "priority_preempt": (
        EngineSpec(
            method="draft_model",
            num_speculative_tokens=2,
            max_num_batched_tokens=256,
            num_kv_blocks=10,
            scheduling_policy="priority",
            max_model_len=512,
        ),
        [
            RequestSpec("low", 40, 60, priority=5),
            RequestSpec("high", 40, 60, arrival_step=2, priority=0),
            RequestSpec("mid", 30, 40, arrival_step=3, priority=3),
        ],
    ),
}


def mixed_accept(req_id: str, step: int, drafts: int) -> int:
    """Deterministic mix of full, partial and no draft acceptance."""
    return step % (drafts + 1)
