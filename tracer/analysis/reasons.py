"""The reasons a "why" can give, defined once: their codes (stable: JSON, Prometheus labels
and Parquet columns carry them), their short labels, and the setting a user can change.

Codes follow the order of vLLM's `Scheduler.schedule()`: the running loop's clips, then the
waiting loop's breaks and skips. tracer.analysis.why decides which one applies;
tracer.render.why words the sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Reason:
    code: str
    label: str  # a few words, for tables, legends and lanes
    knob: str  # what a user can change to relax it ("" when nothing is to change)
    limit: bool = False  # a cap or limit that can hold requests back while budget and KV sit idle


_BUDGET_OR_SEPARATE = "--max-num-batched-tokens, or policy 'separate'"
_ALL = (
    Reason("none", "nothing held back", ""),
    Reason("preemption", "a preemption in this step", "more KV blocks (--num-gpu-blocks-override, memory)"),
    Reason("paused", "scheduler paused", "resume the engine"),
    Reason("target_budget", "target token budget", "--max-num-batched-tokens"),
    Reason("input_budget", "input budget after draft-slot reservations", _BUDGET_OR_SEPARATE),
    Reason("max_num_seqs", "max_num_seqs", "--max-num-seqs", limit=True),
    Reason("max_num_active_seqs", "max_num_active_seqs (B // lookahead)", _BUDGET_OR_SEPARATE, limit=True),
    Reason("kv_blocks", "KV blocks", "more KV blocks (--num-gpu-blocks-override, --gpu-memory-utilization)"),
    Reason("chunked_prefill_off", "chunked prefill off", "--enable-chunked-prefill", limit=True),
    Reason("spec_padding", "uniform spec-decode padding", "--max-num-batched-tokens"),
    Reason("long_prefill", "long-prefill threshold", "--long-prefill-token-threshold", limit=True),
    Reason("max_model_len", "max_model_len", "--max-model-len"),
    Reason("encoder_budget", "encoder budget", "the encoder budget (multimodal inputs)"),
    Reason("deferred", "deferred prefill", "data-parallel prefill balancing"),
    Reason("lora_limit", "LoRA slots full", "--max-loras", limit=True),
    Reason("grammar", "structured-output grammar not ready", ""),
    Reason("remote_kv", "remote KV not yet loaded", ""),
    Reason("streaming_input", "streaming input not complete", ""),
    Reason("async_done", "async: max_tokens already in flight", ""),
    Reason("behind", "behind the head of the queue", ""),
    Reason("unknown", "not decidable from the trace", ""),
)  # fmt: skip

REASONS: Final[dict[str, Reason]] = {r.code: r for r in _ALL}
CODES: Final[tuple[str, ...]] = tuple(REASONS)
CODE_INDEX: Final[dict[str, int]] = {code: i for i, code in enumerate(CODES)}

# How sure a reason is:
EXACT = "exact"  # decided by what the trace recorded of schedule()'s state, in the loop's order
DERIVED = "derived"  # decided the same way from an older trace's fields (format < 1.3)
LIKELY = "likely"  # the trace narrows it to this, with alternatives; `why --exact` settles it
UNKNOWN = "unknown"
CERTAINTIES: Final = (EXACT, DERIVED, LIKELY, UNKNOWN)

# The request states of vLLM's waiting loop that skip a request (it stays waiting).
SKIP_STATUS: Final[dict[str, str]] = {
    "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR": "grammar",
    "WAITING_FOR_FSM": "grammar",
    "WAITING_FOR_REMOTE_KVS": "remote_kv",
    "WAITING_FOR_STREAMING_REQ": "streaming_input",
}


def label(code: str) -> str:
    return REASONS[code].label if code in REASONS else code
