"""Model-runner hook: input-buffer occupancy of the target pass and the drafter pass.

Installed by the tracing scheduler (same process under vLLM's default `uni`
executor) and by the `vllm.general_plugins` entry point (every process). It
patches GPUModelRunner at class level, so the CPU runner, a subclass, is
covered too. Records join their step through the recorder's map of
SchedulerOutputs in flight; a worker in another process (the `mp` executor,
TP > 1) has no recorder and records nothing. See docs/trace-format.md.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from tracer import recorder as _recorder

logger = logging.getLogger("schedscope.runner_hook")

_PATCHED = "_schedscope_patched"
# Step whose drafter pass is running (the runner thread is single: no lock needed).
_draft_step: int | None = None


def register() -> None:
    """`vllm.general_plugins` entry point: vLLM calls it in every process, maybe twice."""
    if _recorder.trace_path_from_env() is not None:
        install()


def install() -> bool:
    """Patch the model runner once; False when vLLM's runner cannot be imported."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception:  # no vLLM, or a build without the GPU runner module
        return False
    if getattr(GPUModelRunner, _PATCHED, False):
        return True
    GPUModelRunner.execute_model = _wrap_execute(GPUModelRunner.execute_model)
    if hasattr(GPUModelRunner, "propose_draft_token_ids"):
        GPUModelRunner.propose_draft_token_ids = _wrap_propose(GPUModelRunner.propose_draft_token_ids)
    setattr(GPUModelRunner, _PATCHED, True)
    return True


def _rows(buffer: Any) -> int | None:
    """First dimension of a runner buffer (CpuGpuBuffer or tensor), if it has one."""
    for candidate in (getattr(buffer, "gpu", None), getattr(buffer, "cpu", None), buffer):
        shape = getattr(candidate, "shape", None)
        if shape:
            return int(shape[0])
    return None


def _wrap_execute(orig: Any) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        rec = _recorder.ACTIVE
        if rec is not None:
            try:
                cap = _rows(getattr(self, "input_ids", None)) or getattr(self, "max_num_tokens", None)
                rec.runner(
                    rec.step_of(scheduler_output),
                    "target",
                    int(scheduler_output.total_num_scheduled_tokens),
                    cap,
                    len(scheduler_output.num_scheduled_tokens),
                )
                _patch_drafter(self)
            except Exception:
                rec.fail("runner hook (target pass)")
        return orig(self, scheduler_output, *args, **kwargs)

    return execute_model


def _wrap_propose(orig: Any) -> Any:
    @functools.wraps(orig)
    def propose_draft_token_ids(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        global _draft_step
        rec = _recorder.ACTIVE
        _draft_step = rec.step_of(scheduler_output) if rec is not None else None
        try:
            return orig(self, scheduler_output, *args, **kwargs)
        finally:
            _draft_step = None

    return propose_draft_token_ids


def _patch_drafter(runner: Any) -> None:
    """Wrap this runner's drafter.propose once, to see the rows it is handed."""
    drafter = getattr(runner, "drafter", None)
    if drafter is None or getattr(drafter, _PATCHED, False):
        return
    orig = drafter.propose
    cap = _rows(getattr(drafter, "input_ids", None))

    @functools.wraps(orig)
    def propose(*args: Any, **kwargs: Any) -> Any:
        rec = _recorder.ACTIVE
        tokens = kwargs.get("target_token_ids")
        # Only model-based drafters run a forward pass over a token buffer;
        # ngram and suffix proposers take none and record nothing.
        if rec is not None and tokens is not None:
            try:
                positions = kwargs.get("next_token_ids")
                reqs = int(positions.shape[0]) if getattr(positions, "shape", None) else None
                rec.runner(_draft_step, "draft", int(tokens.shape[0]), cap, reqs)
            except Exception:
                rec.fail("runner hook (draft pass)")
        return orig(*args, **kwargs)

    drafter.propose = propose
    setattr(drafter, _PATCHED, True)
