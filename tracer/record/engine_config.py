"""Read the engine config a trace header needs from a live vLLM scheduler.

Every field is read with a getattr default: names drift between vLLM releases
(0.32 CPU, 0.33 CUDA), and a missing field must never stop the server.
"""

from __future__ import annotations

from typing import Any

from tracer.trace.spec_decode_methods import is_separate_pass, query_rows_of


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _plain(value: Any) -> Any:
    """Enums (SchedulingPolicy) and the like become their plain value."""
    return getattr(value, "value", value)


def describe_scheduler(sched: Any) -> dict[str, Any]:
    """The header's `config` block for a vLLM v1 Scheduler instance."""
    vcfg = getattr(sched, "vllm_config", None)
    scfg = _get(sched, "scheduler_config") or getattr(vcfg, "scheduler_config", None)
    spec = getattr(vcfg, "speculative_config", None)
    cache = _get(sched, "cache_config") or getattr(vcfg, "cache_config", None)
    model = getattr(vcfg, "model_config", None)

    batched = _get(scfg, "max_num_batched_tokens")
    method = _get(spec, "method") if spec is not None else None
    k = int(_get(spec, "num_speculative_tokens", default=0) or 0) if spec is not None else 0
    draft_slots = int(getattr(spec, "max_num_new_slots_for_drafting", 0) or 0) if spec else 0
    lookahead = int(getattr(vcfg, "num_lookahead_tokens", 0) or 0) if spec is not None else 0
    kv_blocks = _get(getattr(sched, "kv_cache_config", None), "num_blocks")

    return {
        "max_num_batched_tokens": batched,
        "max_num_scheduled_tokens": _get(sched, "max_num_scheduled_tokens")
        or _get(scfg, "max_num_scheduled_tokens", default=batched),
        "max_num_seqs": _get(scfg, "max_num_seqs"),
        # The admission cap the waiting loop checks (0.33 lowers it for DFlash/DSpark).
        "max_num_active_seqs": _get(sched, "max_num_active_reqs")
        or _get(scfg, "max_num_active_seqs", "max_num_seqs"),
        "spec_method": method,
        "num_speculative_tokens": k,
        "draft_slots": draft_slots,
        "query_rows_per_req": query_rows_of(spec),
        # The draft-budget policy's per-step budget of drafter rows (tracer.policies); absent
        # under every other scheduler, whose drafter rows are bounded otherwise or not at all.
        **({"draft_budget": int(sched.schedscope_draft_budget)} if _draft_budget_kept(sched) else {}),
        "num_lookahead_tokens": lookahead,
        # The model runner sizes input_ids/positions (and the drafters their own
        # buffers) to max_num_batched_tokens rows.
        "buffer_capacity": batched,
        "scheduling_policy": str(_plain(_get(sched, "policy") or _get(scfg, "policy", default="fcfs"))),
        # The scheduler class decides how steps interleave, whatever the config says
        # (vLLM 0.32 leaves scheduler_config.async_scheduling unset with --async-scheduling).
        "async_scheduling": bool(_get(scfg, "async_scheduling", default=False))
        or any(c.__name__ == "AsyncScheduler" for c in type(sched).__mro__),
        "block_size": _get(sched, "block_size") or _get(cache, "block_size"),
        "num_kv_blocks": kv_blocks,
        "max_model_len": _get(sched, "max_model_len") or _get(model, "max_model_len"),
        "model": _get(model, "served_model_name", "model"),
        "enable_prefix_caching": bool(getattr(cache, "enable_prefix_caching", False)),
        "long_prefill_token_threshold": int(getattr(scfg, "long_prefill_token_threshold", 0) or 0),
        # 1.3: what the waiting loop's breaks and skips depend on (tracer.analysis.why). Each is
        # read with a default and left null when this vLLM does not say.
        **why_config(sched, scfg),
    }


def _draft_budget_kept(sched: Any) -> bool:
    return bool(getattr(sched, "schedscope_draft_rows", 0)) and bool(
        getattr(sched, "schedscope_draft_budget", 0)
    )


def why_config(sched: Any, scfg: Any) -> dict[str, Any]:
    """The config facts a "why" needs beyond the budgets; null where this vLLM does not say."""
    chunked = getattr(scfg, "enable_chunked_prefill", None)
    lora = getattr(sched, "lora_config", None)
    sd_lookup = getattr(sched, "dynamic_sd_lookup", None)
    spec_tokens = getattr(sched, "num_spec_tokens", None)
    sampled = getattr(sched, "num_sampled_tokens_per_step", None)
    adaptive = getattr(sched, "adaptive_long_prefill_threshold", None)
    encoder = getattr(sched, "max_num_encoder_input_tokens", None)
    return {
        "enable_chunked_prefill": None if chunked is None else bool(chunked),
        "max_loras": int(getattr(lora, "max_loras", 0) or 0) if lora is not None else 0,
        "kv_connector": getattr(sched, "connector", None) is not None,
        # New one-token requests are padded to 1 + K rows beside decoders (uniform spec decode).
        "spec_padding": (
            None
            if spec_tokens is None or sampled is None
            else bool(spec_tokens) and sd_lookup is None and sampled > 0
        ),
        "adaptive_long_prefill_threshold": None if adaptive is None else bool(adaptive),
        "max_num_encoder_input_tokens": None if encoder is None else int(encoder),
        **kv_admission_config(sched, scfg),
    }


def kv_admission_config(sched: Any, scfg: Any) -> dict[str, Any]:
    """How the waiting loop's `allocate_slots` admits a request (1.4): with
    `scheduler_reserve_full_isl` the whole prompt must fit the free blocks, not only its
    first chunk, and the watermark's blocks must stay free beside it while any request runs.
    vLLM 0.31-0.34 keep both on the SchedulerConfig (the flag also on the scheduler); null
    where this vLLM does not say."""
    full = getattr(sched, "scheduler_reserve_full_isl", None)
    if full is None:
        full = getattr(scfg, "scheduler_reserve_full_isl", None)
    watermark = getattr(scfg, "watermark", None)
    blocks = getattr(getattr(sched, "kv_cache_manager", None), "watermark_blocks", None)
    return {
        "scheduler_reserve_full_isl": None if full is None else bool(full),
        "kv_watermark": None if watermark is None else float(watermark),
        "kv_watermark_blocks": None if blocks is None else int(blocks),
    }


def regime_of(config: dict[str, Any]) -> str:
    """Which budget regime a stock scheduler with this config runs under."""
    if not is_separate_pass(config.get("spec_method")):
        return "shared" if config.get("draft_slots") else "none"
    return "additive" if config.get("draft_slots") else "cap"


def engine_index(sched: Any) -> str:
    """The data-parallel rank vLLM labels this engine's metrics with (`engine="0"`)."""
    parallel = getattr(getattr(sched, "vllm_config", None), "parallel_config", None)
    for name in ("data_parallel_index", "data_parallel_rank"):
        value = getattr(parallel, name, None)
        if isinstance(value, int):
            return str(value)
    return "0"
