"""Named synthetic workloads for the real scheduler: tests, sample traces and benches share them."""

from __future__ import annotations

from tracer.offline import EngineSpec, RequestSpec

SCENARIOS: dict[str, tuple[EngineSpec, list[RequestSpec]]] = {
    # The motivating fault: DFlash K=7 on vLLM 0.32 reserves 7 draft slots per
    # request against the 8,192-token input budget, so a 32k prefill advances
    # 8,185 tokens a step. Three short requests arrive in step 2 and wait.
    "dflash_k7": (
        EngineSpec(method="dflash", num_speculative_tokens=7, max_num_batched_tokens=8192),
        [RequestSpec("long", 32768, 4), *(RequestSpec(f"s{i}", 100, 6, arrival_step=2) for i in range(3))],
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
}


def mixed_accept(req_id: str, step: int, drafts: int) -> int:
    """Deterministic mix of full, partial and no draft acceptance."""
    return step % (drafts + 1)
