"""Model-runner hook: input-buffer occupancy of the target pass and the drafter pass.

The model runner often lives in another process than the scheduler (on CPU
vLLM always uses the `mp` executor: EngineCore and a Worker process). So the
hook writes nothing itself. It notes what each pass was handed, and attaches
those notes to the step's ModelRunnerOutput as `_schedscope_runner`. Pickle
carries instance attributes, so the notes travel back to EngineCore, where
the recorder's update_from_output() hook turns them into `runner` records of
the right step. One writer, one file, no step-number guessing.

Installed in every process by the `vllm.general_plugins` entry point (when
SCHEDSCOPE_TRACE is set), and by the tracing scheduler for the `uni` executor.
It patches GPUModelRunner at class level, which covers the CPU runner too.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from tracer import recorder as _recorder

logger = logging.getLogger("schedscope.runner_hook")

ATTR = _recorder.RUNNER_NOTES_ATTR
_PATCHED = "_schedscope_patched"
# (pass, rows, capacity, requests) noted since the current step's execute_model.
# The runner calls execute_model/sample_tokens from one thread: no lock needed.
_notes: list[tuple[str, int, int | None, int | None]] = []
_failures = 0


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
    if GPUModelRunner.__dict__.get(_PATCHED, False):
        return True
    GPUModelRunner.execute_model = _wrap_execute(GPUModelRunner.execute_model)
    if hasattr(GPUModelRunner, "sample_tokens"):
        GPUModelRunner.sample_tokens = _wrap_sample(GPUModelRunner.sample_tokens)
    setattr(GPUModelRunner, _PATCHED, True)
    return True


def _fault(where: str) -> None:
    global _failures
    _failures += 1
    if _failures == 1:
        logger.exception("schedscope: runner hook error in %s; the model runs unaffected", where)


def _rows(buffer: Any) -> int | None:
    """First dimension of a runner buffer (CpuGpuBuffer or tensor), if it has one."""
    for candidate in (getattr(buffer, "gpu", None), getattr(buffer, "cpu", None), buffer):
        shape = getattr(candidate, "shape", None)
        if shape:
            return int(shape[0])
    return None


def _attach(output: Any) -> Any:
    """Hand the notes to the output that goes back to the scheduler; clear them."""
    if not _notes or output is None:
        return output
    notes = list(_notes)
    _notes.clear()
    get_output = getattr(output, "get_output", None)
    try:
        if callable(get_output):  # AsyncModelRunnerOutput: attach to what it yields

            def get_output_with_notes() -> Any:
                result = get_output()
                setattr(result, ATTR, notes)
                return result

            output.get_output = get_output_with_notes
        else:
            setattr(output, ATTR, notes)
    except Exception:  # slotted or frozen outputs: lose the notes, not the step
        _fault("attach")
    return output


def _wrap_execute(orig: Any) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _notes.clear()
            cap = _rows(getattr(self, "input_ids", None)) or getattr(self, "max_num_tokens", None)
            rows = int(scheduler_output.total_num_scheduled_tokens)
            _notes.append(("target", rows, cap, len(scheduler_output.num_scheduled_tokens)))
            _patch_drafter(self)
        except Exception:
            _fault("execute_model")
        output = orig(self, scheduler_output, *args, **kwargs)
        # Some paths (nothing scheduled, pooling models) return the output here.
        return _attach(output) if output is not None and hasattr(output, "req_ids") else output

    return execute_model


def _wrap_sample(orig: Any) -> Any:
    @functools.wraps(orig)
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _attach(orig(self, *args, **kwargs))

    return sample_tokens


def _patch_drafter(runner: Any) -> None:
    """Wrap this runner's drafter.propose once, to see the rows it is handed."""
    drafter = getattr(runner, "drafter", None)
    if drafter is None or getattr(drafter, _PATCHED, False):
        return
    orig = drafter.propose
    cap = _rows(getattr(drafter, "input_ids", None))

    @functools.wraps(orig)
    def propose(*args: Any, **kwargs: Any) -> Any:
        tokens = kwargs.get("target_token_ids")
        # Only model-based drafters run a forward pass over a token buffer;
        # ngram and suffix proposers take none and note nothing.
        if tokens is not None:
            try:
                nexts = kwargs.get("next_token_ids")
                reqs = int(nexts.shape[0]) if getattr(nexts, "shape", None) else None
                _notes.append(("draft", int(tokens.shape[0]), cap, reqs))
            except Exception:
                _fault("drafter.propose")
        return orig(*args, **kwargs)

    drafter.propose = propose
    setattr(drafter, _PATCHED, True)
