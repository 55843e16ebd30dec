"""Trace format v1: record kinds, versions and the defaults a reader fills in.

This module is the single source of truth for the on-disk format. The writer
builds records with these keys, the reader validates and defaults them, and
docs/trace-format.md describes them. Keep the three in step.
"""

from __future__ import annotations

from typing import Any, Final

SCHEMA_VERSION: Final = "1.4"
SCHEMA_MAJOR: Final = 1

HEADER: Final = "header"
STEP: Final = "step"
RUNNER: Final = "runner"
FOOTER: Final = "footer"
# Since 1.1: which runner/speculator hooks were active, reported from the runner's process.
HOOKS: Final = "hooks"
# Written by `schedscope attach --save` where the live stream lost steps: after..before, exclusive.
GAP: Final = "gap"
# The live stream's keep-alive while the engine is idle. Stream only (never saved); a reader
# that finds one in a file skips it.
HEARTBEAT: Final = "heartbeat"
# Seconds without a record before the stream sends a viewer a heartbeat; the client reads
# a silence of several as a dead link (tracer.trace.attach.READ_TIMEOUT).
HEARTBEAT_INTERVAL: Final = 2.0
# The served model name the offline harness records (tracer.whatif.offline): a trace naming it
# timed the scheduler's own CPU work, no model. Here so a reader can tell without loading vLLM's side.
OFFLINE_MODEL_NAME: Final = "schedscope-offline-llama"
# The vLLM releases (major, minor) this schedscope records and replays, each tested in CI in a
# virtualenv of its own (.ci/test): a trace's header names the one that recorded it.
SUPPORTED_VLLM: Final = ((0, 31), (0, 32), (0, 33), (0, 34))

# Engine config keys in the header, with the default a reader assumes when an
# older trace lacks one. None means "unknown".
CONFIG_DEFAULTS: Final[dict[str, Any]] = {
    "max_num_batched_tokens": None,
    "max_num_scheduled_tokens": None,
    "max_num_seqs": None,
    "max_num_active_seqs": None,
    "spec_method": None,
    "num_speculative_tokens": 0,
    "draft_slots": 0,
    "query_rows_per_req": 0,
    "num_lookahead_tokens": 0,
    "buffer_capacity": None,
    "scheduling_policy": "fcfs",
    "async_scheduling": False,
    "block_size": None,
    "num_kv_blocks": None,
    "max_model_len": None,
    "model": None,
    # 1.1; None (unknown) in older traces.
    "enable_prefix_caching": None,
    "long_prefill_token_threshold": None,
    # 1.3: what the waiting loop's breaks and skips depend on; None (unknown) in older traces.
    "enable_chunked_prefill": None,
    "max_loras": None,
    "kv_connector": None,
    "spec_padding": None,
    "adaptive_long_prefill_threshold": None,
    "max_num_encoder_input_tokens": None,
    # 1.4: how the waiting loop's KV allocation admits a request; None (unknown) in older traces.
    "scheduler_reserve_full_isl": None,  # the whole prompt must fit the free blocks, not just a chunk
    "kv_watermark": None,  # the share of the pool kept free when admitting waiting requests
    "kv_watermark_blocks": None,  # those blocks: int(kv_watermark * num_kv_blocks)
}

HEADER_DEFAULTS: Final[dict[str, Any]] = {
    "schedscope_version": None,
    "vllm_version": None,
    "scheduler_cls": None,
    "policy": "stock",
    "regime": None,
    "start_time": None,
    "pid": None,
}

# Step keys. Required keys have no default: a step without them is malformed.
STEP_REQUIRED: Final = ("step", "t", "target", "input")
STEP_DEFAULTS: Final[dict[str, Any]] = {
    "sched_us": 0.0,
    "query": None,
    "new": [],
    "resumed": [],
    "running": [],
    "preempted": [],
    "finished": [],
    "unscheduled": [],
    "waiting_demand": [],
    "waiting_demand_truncated": 0,
    "priority": None,
    "num_waiting": 0,
    "num_running": 0,
    "kv_usage": 0.0,
    "sampled": None,
    # 1.1: what the engine told the scheduler before this step (arrivals, aborts,
    # drafts, model outputs, in order) and how requests ended in this step's update.
    # None in older traces, which a replay can re-make only approximately.
    "inputs": None,
    "ends": None,
    # 1.3: the facts a "why" rests on (tracer.analysis.why); None in older traces.
    "kv_free": None,  # [free KV blocks before schedule(), after]
    "cached": None,  # {id: tokens found in the prefix cache} for requests admitted or resumed
    "waiting_status": None,  # {id: status} of listed waiting requests in a WAITING_FOR_* state
    "preemptions": None,  # [[victim, trigger, computed tokens lost, free blocks before, after], ...]
    "paused": None,  # the scheduler's pause state when not unpaused ("PAUSED_NEW", "PAUSED_ALL")
}

# The step keys format 1.3 added: the facts a "why" rests on.
WHY_STEP_KEYS: Final = ("kv_free", "cached", "waiting_status", "preemptions", "paused")

RUNNER_REQUIRED: Final = ("step", "pass", "rows")
# Optional runner keys: "cap", "reqs", and since 1.1 "padded" (rows after CUDA-graph/DP padding).
RUNNER_PASSES: Final = ("target", "draft")

# The footer's facts, kept current beside a trace while it is written (`<trace>.end`, one JSON
# object padded with spaces): a server killed before it wrote its footer (vLLM's process
# manager force-kills EngineCore at once with --shutdown-timeout 0) leaves them there, and the
# reader takes them as the footer when they count every step the file holds (`kept`: true).
KEPT_FOOTER_SUFFIX: Final = ".end"
KEPT_FOOTER_BYTES: Final = 512
FOOTER_DEFAULTS: Final[dict[str, Any]] = {
    "steps_written": 0,
    "records_dropped": 0,
    "errors": 0,
    "end_time": None,
}

# Per-request entries of "new", "resumed" and "running":
# [req_id, tokens, spec_tokens, demand], demand being the tokens the request
# still needed before schedule() clipped it (-1 when unknown).
# Entries of "waiting_demand" and "unscheduled": [req_id, demand].
# How many not-admitted waiting requests a step lists (queue order). The budget
# model needs only the head of the queue; the rest is counted.
WAITING_DEMAND_LIMIT: Final = 32


def parse_version(value: object) -> tuple[int, int]:
    """Split "MAJOR.MINOR" into ints; raises ValueError on anything else."""
    if not isinstance(value, str):
        raise ValueError(f"schema version must be a string like '1.0', got {value!r}")
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)
