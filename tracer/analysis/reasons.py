"""The reasons a "why" can give, defined once: their codes (stable: JSON, Prometheus labels
and Parquet columns carry them), their short labels, and the setting a user can change.

Codes follow the order of vLLM's `Scheduler.schedule()`: the running loop's clips, then the
waiting loop's breaks and skips. tracer.analysis.why decides which one applies;
tracer.render.why words the sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final


@dataclass(frozen=True)
class Reason:
    code: str
    label: str  # a few words, for tables, legends and lanes
    knob: str  # what a user can change to relax it ("" when nothing is to change)
    limit: bool = False  # a cap or limit that can hold requests back while budget and KV sit idle
    # Its colour in the TUI's request lanes and the web app's Gantt and area chart (one place,
    # both views): Okabe & Ito's colour-blind-safe palette for the common reasons, Paul Tol's
    # muted scheme for the rarer ones; "none" colours a request scheduled in full.
    color: str = "#777777"


_BUDGET_OR_SEPARATE = "--max-num-batched-tokens, or policy 'draft-budget'"
_ALL = (
    Reason("none", "nothing held back", ""),
    Reason("preemption", "a preemption in this step", "more KV blocks (--num-gpu-blocks-override, memory)"),
    Reason("paused", "scheduler paused", "resume the engine"),
    Reason("target_budget", "target token budget", "--max-num-batched-tokens"),
    Reason("input_budget", "input budget after draft-slot reservations", _BUDGET_OR_SEPARATE),
    Reason("draft_budget", "draft-input budget (drafter rows)", "--max-num-batched-tokens (drafter rows)"),
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

# Each reason's colour (Reason.color), in the same order.
_COLORS = {
    "none": "#56B4E9",  # sky blue: scheduled in full
    "preemption": "#882255",
    "paused": "#999933",
    "target_budget": "#009E73",
    "input_budget": "#0072B2",
    "draft_budget": "#4477AA",
    "max_num_seqs": "#E69F00",
    "max_num_active_seqs": "#CC79A7",
    "kv_blocks": "#D55E00",
    "chunked_prefill_off": "#332288",
    "spec_padding": "#44AA99",
    "long_prefill": "#DDCC77",
    "max_model_len": "#117733",
    "encoder_budget": "#AA4499",
    "deferred": "#88CCEE",
    "lora_limit": "#CC6677",
    "grammar": "#F0E442",
    "remote_kv": "#661100",
    "streaming_input": "#6699CC",
    "async_done": "#AA4466",
    "behind": "#BBBBBB",
    "unknown": "#777777",
}

REASONS: Final[dict[str, Reason]] = {r.code: replace(r, color=_COLORS[r.code]) for r in _ALL}
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


def color(code: str) -> str:
    """The reason's colour (a hex string); "unknown"'s for a code not listed."""
    return (REASONS.get(code) or REASONS["unknown"]).color
