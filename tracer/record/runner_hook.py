"""Model-runner hook: input-buffer occupancy of the target pass and the drafter pass.

The notes travel back to EngineCore on the step's ModelRunnerOutput
(tracer.record.runner_notes); this module patches the runners, to note what each pass is handed.

Two runners are hooked, whichever this vLLM has:
- V1, `vllm.v1.worker.gpu_model_runner.GPUModelRunner` (the CPU runner derives
  from it): execute_model/sample_tokens and the drafter's propose();
- V2, `vllm.v1.worker.gpu.model_runner.GPUModelRunner` (vLLM 0.33 with Triton):
  execute_model, prepare_inputs (target rows, and the rows after CUDA-graph/DP
  padding), sample_tokens (which returns the AsyncOutput and runs the
  speculator), and the speculator's propose() with the padded size its
  cudagraph dispatch picked.

A V2 runner's speculator is hooked by tracer.record.speculator_hook. A class or
signature that moved is not patched: one warning is logged and the hook state
lists it under `inactive`. Nothing here ever raises into the runner.

Installed in every process by the `vllm.general_plugins` entry point (when
SCHEDSCOPE_TRACE is set), and by the tracing scheduler for the `uni` executor.
Patches are at class level, so every runner and speculator instance is covered.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

from tracer.record.config import trace_path_from_env
from tracer.record.runner_notes import (
    PATCHED,
    argument_reader,
    attach,
    fault,
    mark_inactive,
    pass_padded,
    passes,
    qualname,
    rows_in,
    set_state,
)
from tracer.record.snapshot import RunnerNote
from tracer.record.speculator_hook import patch_speculator_class

logger = logging.getLogger("schedscope.runner_hook")

V1_RUNNER = ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
V2_RUNNER = ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")

# Inside a V2 execute_model that is a real step (not a warmup or dummy run).
_in_real_execute = False


def register() -> None:
    """`vllm.general_plugins` entry point: vLLM calls it in every process, maybe twice."""
    if trace_path_from_env() is not None:
        install()


def install() -> bool:
    """Patch the V1 and V2 model runner classes this vLLM has; False when neither could be."""
    v1 = _install_from(V1_RUNNER, install_v1)
    v2 = _install_from(V2_RUNNER, install_v2)
    if not (v1 or v2) and _vllm_present():
        mark_inactive("no model runner class to hook: runner records will be missing")
    return v1 or v2


def _install_from(where: tuple[str, str], patch: Callable[[type], bool]) -> bool:
    module, name = where
    try:
        mod = importlib.import_module(module)
    except ImportError:  # a vLLM without this runner (no vLLM, an older or a newer one)
        return False
    except Exception as exc:  # the module exists but cannot run here (e.g. no Triton)
        logger.debug("schedscope: cannot import %s: %r", module, exc)
        return False
    cls = getattr(mod, name, None)
    if not isinstance(cls, type):
        mark_inactive(f"{module} has no class {name} any more: that runner is not hooked")
        return False
    try:
        return patch(cls)
    except Exception:
        fault(f"install {module}.{name}")
        return False


def _vllm_present() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def _runner_seen(runner: Any, version: str) -> None:
    """First real step of a runner instance: note which runner runs (and, for V2,
    hook the class of the speculator it holds)."""
    if getattr(runner, "_schedscope_seen", False):
        return
    runner._schedscope_seen = True
    set_state(runner=version, runner_cls=qualname(type(runner)))
    if version == "v2":
        speculator = getattr(runner, "speculator", None)
        if speculator is not None:
            patch_speculator_class(type(speculator))


# -- V1 runner ----------------------------------------------------------------------------
def install_v1(cls: type) -> bool:
    """Patch a V1 GPUModelRunner class (execute_model, sample_tokens)."""
    if cls.__dict__.get(PATCHED, False):
        return True
    if not callable(getattr(cls, "execute_model", None)):
        mark_inactive(f"{qualname(cls)} has no execute_model: V1 runner not hooked")
        return False
    cls.execute_model = _wrap_execute(cls.execute_model)
    if hasattr(cls, "sample_tokens"):
        cls.sample_tokens = _wrap_sample(cls.sample_tokens)
    setattr(cls, PATCHED, True)
    return True


def _wrap_execute(orig: Any) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            passes.clear()
            _runner_seen(self, "v1")
            cap = rows_in(getattr(self, "input_ids", None)) or getattr(self, "max_num_tokens", None)
            rows = int(scheduler_output.total_num_scheduled_tokens)
            reqs = len(scheduler_output.num_scheduled_tokens)
            passes.append(RunnerNote(pass_="target", rows=rows, cap=cap, reqs=reqs))
            _patch_drafter(self)
        except Exception:
            fault("execute_model")
        output = orig(self, scheduler_output, *args, **kwargs)
        # Some paths (nothing scheduled, pooling models) return the output here.
        return attach(output) if output is not None and hasattr(output, "req_ids") else output

    setattr(execute_model, PATCHED, True)
    return execute_model


def _wrap_sample(orig: Any) -> Any:
    @functools.wraps(orig)
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        return attach(orig(self, *args, **kwargs))

    setattr(sample_tokens, PATCHED, True)
    return sample_tokens


def _patch_drafter(runner: Any) -> None:
    """Wrap this V1 runner's drafter.propose once, to see the rows it is handed."""
    drafter = getattr(runner, "drafter", None)
    if drafter is None or getattr(drafter, PATCHED, False):
        return
    orig = drafter.propose
    cap = rows_in(getattr(drafter, "input_ids", None))

    @functools.wraps(orig)
    def propose(*args: Any, **kwargs: Any) -> Any:
        tokens = kwargs.get("target_token_ids")
        # Only model-based drafters run a forward pass over a token buffer;
        # ngram and suffix proposers take none and note nothing.
        if tokens is not None:
            try:
                nexts = kwargs.get("next_token_ids")
                reqs = int(nexts.shape[0]) if getattr(nexts, "shape", None) else None
                passes.append(RunnerNote(pass_="draft", rows=int(tokens.shape[0]), cap=cap, reqs=reqs))
            except Exception:
                fault("drafter.propose")
        return orig(*args, **kwargs)

    drafter.propose = propose
    setattr(drafter, PATCHED, True)
    set_state(speculator=qualname(type(drafter)), speculator_rows="propose")


# -- V2 runner ----------------------------------------------------------------------------
def install_v2(cls: type) -> bool:
    """Patch a V2 GPUModelRunner class: execute_model and sample_tokens (required), and
    prepare_inputs (the padded rows; without it the target rows come from the
    SchedulerOutput). False, with one warning, when the required ones moved."""
    if cls.__dict__.get(PATCHED, False):
        return True
    name = qualname(cls)
    execute, sample = getattr(cls, "execute_model", None), getattr(cls, "sample_tokens", None)
    scheduler_output = argument_reader(execute, "scheduler_output") if callable(execute) else None
    dummy_run = argument_reader(execute, "dummy_run", False) if callable(execute) else None
    if scheduler_output is None or dummy_run is None or not callable(sample):
        mark_inactive(
            f"{name}: execute_model(scheduler_output, dummy_run)/sample_tokens moved: V2 runner not hooked"
        )
        return False
    prepare = getattr(cls, "prepare_inputs", None)
    prepared = callable(prepare) and argument_reader(prepare, "batch_desc") is not None
    if prepared:
        cls.prepare_inputs = _wrap_v2_prepare(prepare)
    else:
        mark_inactive(
            f"{name}.prepare_inputs(…, batch_desc, …) moved: target rows without CUDA-graph padding"
        )
    cls.execute_model = _wrap_v2_execute(execute, scheduler_output, dummy_run, fallback=not prepared)
    cls.sample_tokens = _wrap_sample(sample)
    setattr(cls, PATCHED, True)
    return True


def _wrap_v2_execute(orig: Any, scheduler_output: Any, dummy_run: Any, *, fallback: bool) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        real = False
        try:
            # Warmup, profiling and idle-DP-rank runs are dummies: nothing to note.
            real = not dummy_run(args, kwargs)
            if real:
                passes.clear()
                _runner_seen(self, "v2")
                out = scheduler_output(args, kwargs)
                total = int(out.total_num_scheduled_tokens)
                if fallback and total:
                    reqs = len(out.num_scheduled_tokens)
                    passes.append(RunnerNote(pass_="target", rows=total, cap=_v2_capacity(self), reqs=reqs))
        except Exception:
            fault("execute_model")
        global _in_real_execute
        _in_real_execute = real
        try:
            output = orig(self, *args, **kwargs)
        finally:
            _in_real_execute = False
        # Nothing scheduled: vLLM returns its shared empty output here; no notes were taken.
        if real and output is not None and hasattr(output, "req_ids"):
            return attach(output)
        return output

    setattr(execute_model, PATCHED, True)
    return execute_model


def _v2_capacity(runner: Any) -> int | None:
    buffers = getattr(runner, "input_buffers", None)
    return rows_in(getattr(buffers, "input_ids", None)) or getattr(runner, "max_num_tokens", None)


def _wrap_v2_prepare(orig: Any) -> Any:
    @functools.wraps(orig)
    def prepare_inputs(self: Any, *args: Any, **kwargs: Any) -> Any:
        batch = orig(self, *args, **kwargs)
        if not _in_real_execute:  # only a real step's batch is noted (dummies build their own)
            return batch
        try:
            # num_tokens: the rows written (fewer than scheduled under adaptive
            # verification); num_tokens_after_padding: the rows the forward runs on.
            note = RunnerNote(
                pass_="target",
                rows=int(batch.num_tokens),
                cap=_v2_capacity(self),
                reqs=int(batch.num_reqs),
                padded=int(batch.num_tokens_after_padding),
                notes_padding=True,
            )
            passes.append(note)
            pass_padded("target")
        except Exception:
            fault("prepare_inputs")
        return batch

    setattr(prepare_inputs, PATCHED, True)
    return prepare_inputs
