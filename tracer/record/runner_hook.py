"""Model-runner hook: input-buffer occupancy of the target pass and the drafter pass.

The model runner often lives in another process than the scheduler (on CPU
vLLM always uses the `mp` executor: EngineCore and a Worker process). So the
hook writes nothing itself. It notes what each pass was handed, and attaches
those notes to the step's ModelRunnerOutput as `_schedscope_runner`. Pickle
carries instance attributes, so the notes travel back to EngineCore, where
the recorder's update_from_output() hook turns them into `runner` records of
the right step. One writer, one file, no step-number guessing.

Two runners are hooked, whichever this vLLM has:
- V1, `vllm.v1.worker.gpu_model_runner.GPUModelRunner` (the CPU runner derives
  from it): execute_model/sample_tokens and the drafter's propose();
- V2, `vllm.v1.worker.gpu.model_runner.GPUModelRunner` (vLLM 0.33 with Triton):
  execute_model, prepare_inputs (target rows, and the rows after CUDA-graph/DP
  padding), sample_tokens (which returns the AsyncOutput and runs the
  speculator), and the speculator's propose() with the padded size its
  cudagraph dispatch picked.

Which hooks are active is known only here, in the runner's process. So this
process's hook state travels with the first notes after it changes, as
`_schedscope_hooks`, and the recorder writes it as a `hooks` record. A class or
signature that moved is not patched: one warning is logged and the state lists
it under `inactive`. Nothing here ever raises into the runner.

Installed in every process by the `vllm.general_plugins` entry point (when
SCHEDSCOPE_TRACE is set), and by the tracing scheduler for the `uni` executor.
Patches are at class level, so every runner and speculator instance is covered.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

from tracer.record.config import trace_path_from_env
from tracer.record.snapshot import RUNNER_HOOKS_ATTR, RUNNER_NOTES_ATTR, RunnerNote

logger = logging.getLogger("schedscope.runner_hook")

ATTR = RUNNER_NOTES_ATTR
HOOKS_ATTR = RUNNER_HOOKS_ATTR
_PATCHED = "_schedscope_patched"
V1_RUNNER = ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
V2_RUNNER = ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")

# The passes noted since the current step's execute_model. The runner calls
# execute_model/sample_tokens from one thread: no lock.
_notes: list[RunnerNote] = []
_failures = 0
_warned: set[str] = set()


def _fresh_state() -> dict[str, Any]:
    return {
        "runner": None,  # "v1" | "v2": the runner that executed
        "runner_cls": None,
        "speculator": None,  # class of the runner's drafter/speculator, if any
        "speculator_rows": None,  # how its draft rows are noted (None: not noted)
        "padded": [],  # passes whose padded rows are recorded
        "inactive": [],  # hooks that could not be installed, one sentence each
    }


# What this process's hooks do; a copy rides on the first notes after each change.
_state: dict[str, Any] = _fresh_state()
_state_dirty = False

# The speculator's propose() in flight (a note is pending) and the padded sizes its
# cudagraph dispatch picked meanwhile; the first one is the query (or prefill) pass.
_in_propose = False
_dispatched: list[int] = []
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
        _inactive("no model runner class to hook: runner records will be missing")
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
        _inactive(f"{module} has no class {name} any more: that runner is not hooked")
        return False
    try:
        return patch(cls)
    except Exception:
        _fault(f"install {module}.{name}")
        return False


def _vllm_present() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


# -- state, warnings, faults ------------------------------------------------------------
def _set_state(**changes: Any) -> None:
    global _state_dirty
    for key, value in changes.items():
        if _state.get(key) != value:
            _state[key] = value
            _state_dirty = True


def _inactive(reason: str) -> None:
    """A hook that cannot work on this vLLM: one warning, and listed in the hooks record."""
    global _state_dirty
    if reason in _warned:
        return
    _warned.add(reason)
    _state["inactive"] = [*_state["inactive"], reason]
    _state_dirty = True
    logger.warning("schedscope: %s; vLLM runs unaffected", reason)


def _pass_padded(pass_: str) -> None:
    if pass_ not in _state["padded"]:
        _set_state(padded=[p for p in ("target", "draft") if p == pass_ or p in _state["padded"]])


def hook_state() -> dict[str, Any]:
    """A copy of this process's hook state (what a `hooks` record carries)."""
    padded, inactive = list(_state["padded"]), list(_state["inactive"])
    return {**_state, "padded": padded, "inactive": inactive, "pid": os.getpid()}


def _fault(where: str) -> None:
    global _failures
    _failures += 1
    if _failures == 1:
        logger.exception("schedscope: runner hook error in %s; the model runs unaffected", where)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _rows(buffer: Any) -> int | None:
    """First dimension of a runner buffer (CpuGpuBuffer or tensor), if it has one."""
    for candidate in (getattr(buffer, "gpu", None), getattr(buffer, "cpu", None), buffer):
        shape = getattr(candidate, "shape", None)
        if shape:
            return int(shape[0])
    return None


def _argument(func: Any, name: str, default: Any = None) -> Callable[[tuple, dict], Any] | None:
    """A reader of argument `name` from a call's (args, kwargs), `self` excluded, built
    from func's signature once; None when func has no such parameter (it moved)."""
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None
    if name not in params:
        return None
    index = params.index(name) - 1  # args exclude self

    def read(args: tuple, kwargs: dict) -> Any:
        if name in kwargs:
            return kwargs[name]
        return args[index] if 0 <= index < len(args) else default

    return read


def _attach(output: Any) -> Any:
    """Hand the notes (and the hook state, if it changed) to the output that goes back
    to the scheduler; clear them."""
    global _state_dirty
    if not _notes or output is None:
        return output
    notes = list(_notes)
    _notes.clear()
    hooks = hook_state() if _state_dirty else None
    try:
        # The V2 AsyncOutput holds the very ModelRunnerOutput its get_output() returns.
        target = getattr(output, "model_runner_output", None)
        if target is not None:
            _mark(target, notes, hooks)
        elif callable(getattr(output, "get_output", None)):  # V1 async output: mark what it yields
            get_output = output.get_output

            def get_output_with_notes() -> Any:
                result = get_output()
                _mark(result, notes, hooks)
                return result

            output.get_output = get_output_with_notes
        else:
            _mark(output, notes, hooks)
        if hooks is not None:
            _state_dirty = False
    except Exception:  # slotted or frozen outputs: lose the notes, not the step
        _fault("attach")
    return output


def _mark(output: Any, notes: list[RunnerNote], hooks: dict[str, Any] | None) -> None:
    setattr(output, ATTR, notes)
    if hooks is not None:
        setattr(output, HOOKS_ATTR, hooks)


def _runner_seen(runner: Any, version: str) -> None:
    """First real step of a runner instance: note which runner runs (and, for V2,
    hook the class of the speculator it holds)."""
    if getattr(runner, "_schedscope_seen", False):
        return
    runner._schedscope_seen = True
    _set_state(runner=version, runner_cls=_qualname(type(runner)))
    if version == "v2":
        speculator = getattr(runner, "speculator", None)
        if speculator is not None:
            patch_speculator_class(type(speculator))


# -- V1 runner ----------------------------------------------------------------------------
def install_v1(cls: type) -> bool:
    """Patch a V1 GPUModelRunner class (execute_model, sample_tokens)."""
    if cls.__dict__.get(_PATCHED, False):
        return True
    if not callable(getattr(cls, "execute_model", None)):
        _inactive(f"{_qualname(cls)} has no execute_model: V1 runner not hooked")
        return False
    cls.execute_model = _wrap_execute(cls.execute_model)
    if hasattr(cls, "sample_tokens"):
        cls.sample_tokens = _wrap_sample(cls.sample_tokens)
    setattr(cls, _PATCHED, True)
    return True


def _wrap_execute(orig: Any) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _notes.clear()
            _runner_seen(self, "v1")
            cap = _rows(getattr(self, "input_ids", None)) or getattr(self, "max_num_tokens", None)
            rows = int(scheduler_output.total_num_scheduled_tokens)
            reqs = len(scheduler_output.num_scheduled_tokens)
            _notes.append(RunnerNote(pass_="target", rows=rows, cap=cap, reqs=reqs))
            _patch_drafter(self)
        except Exception:
            _fault("execute_model")
        output = orig(self, scheduler_output, *args, **kwargs)
        # Some paths (nothing scheduled, pooling models) return the output here.
        return _attach(output) if output is not None and hasattr(output, "req_ids") else output

    setattr(execute_model, _PATCHED, True)
    return execute_model


def _wrap_sample(orig: Any) -> Any:
    @functools.wraps(orig)
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _attach(orig(self, *args, **kwargs))

    setattr(sample_tokens, _PATCHED, True)
    return sample_tokens


def _patch_drafter(runner: Any) -> None:
    """Wrap this V1 runner's drafter.propose once, to see the rows it is handed."""
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
                _notes.append(RunnerNote(pass_="draft", rows=int(tokens.shape[0]), cap=cap, reqs=reqs))
            except Exception:
                _fault("drafter.propose")
        return orig(*args, **kwargs)

    drafter.propose = propose
    setattr(drafter, _PATCHED, True)
    _set_state(speculator=_qualname(type(drafter)), speculator_rows="propose")


# -- V2 runner ----------------------------------------------------------------------------
def install_v2(cls: type) -> bool:
    """Patch a V2 GPUModelRunner class: execute_model and sample_tokens (required), and
    prepare_inputs (the padded rows; without it the target rows come from the
    SchedulerOutput). False, with one warning, when the required ones moved."""
    if cls.__dict__.get(_PATCHED, False):
        return True
    name = _qualname(cls)
    execute, sample = getattr(cls, "execute_model", None), getattr(cls, "sample_tokens", None)
    scheduler_output = _argument(execute, "scheduler_output") if callable(execute) else None
    dummy_run = _argument(execute, "dummy_run", False) if callable(execute) else None
    if scheduler_output is None or dummy_run is None or not callable(sample):
        _inactive(
            f"{name}: execute_model(scheduler_output, dummy_run)/sample_tokens moved: V2 runner not hooked"
        )
        return False
    prepare = getattr(cls, "prepare_inputs", None)
    prepared = callable(prepare) and _argument(prepare, "batch_desc") is not None
    if prepared:
        cls.prepare_inputs = _wrap_v2_prepare(prepare)
    else:
        _inactive(f"{name}.prepare_inputs(…, batch_desc, …) moved: target rows without CUDA-graph padding")
    cls.execute_model = _wrap_v2_execute(execute, scheduler_output, dummy_run, fallback=not prepared)
    cls.sample_tokens = _wrap_sample(sample)
    setattr(cls, _PATCHED, True)
    return True


def _wrap_v2_execute(orig: Any, scheduler_output: Any, dummy_run: Any, *, fallback: bool) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        real = False
        try:
            # Warmup, profiling and idle-DP-rank runs are dummies: nothing to note.
            real = not dummy_run(args, kwargs)
            if real:
                _notes.clear()
                _runner_seen(self, "v2")
                out = scheduler_output(args, kwargs)
                total = int(out.total_num_scheduled_tokens)
                if fallback and total:
                    reqs = len(out.num_scheduled_tokens)
                    _notes.append(RunnerNote(pass_="target", rows=total, cap=_v2_capacity(self), reqs=reqs))
        except Exception:
            _fault("execute_model")
        global _in_real_execute
        _in_real_execute = real
        try:
            output = orig(self, *args, **kwargs)
        finally:
            _in_real_execute = False
        # Nothing scheduled: vLLM returns its shared empty output here; no notes were taken.
        if real and output is not None and hasattr(output, "req_ids"):
            return _attach(output)
        return output

    setattr(execute_model, _PATCHED, True)
    return execute_model


def _v2_capacity(runner: Any) -> int | None:
    buffers = getattr(runner, "input_buffers", None)
    return _rows(getattr(buffers, "input_ids", None)) or getattr(runner, "max_num_tokens", None)


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
            _notes.append(note)
            _pass_padded("target")
        except Exception:
            _fault("prepare_inputs")
        return batch

    setattr(prepare_inputs, _PATCHED, True)
    return prepare_inputs


# -- V2 speculators -----------------------------------------------------------------------
# Draft rows of a speculator's first forward pass, by the vLLM base class it derives
# from: (rule name, rows(speculator, input_batch, num_speculative_tokens), capacity).
Rule = tuple[str, Callable[[Any, Any, Any], int], Callable[[Any], int | None]]


def _query_rows(spec: Any, batch: Any, k: Any) -> int:
    # DFlash/DSpark: one query pass of num_query_per_req rows per request (K+1, or K for
    # DSpark sampling from the anchor), in the drafter's own buffer; none when K is 0.
    return 0 if k == 0 else int(batch.num_reqs) * int(spec.num_query_per_req)


def _target_rows(spec: Any, batch: Any, k: Any) -> int:
    # EAGLE/MTP: the draft prefill runs over the target's rows; K-1 decode passes of
    # one row per request follow, in the same buffer.
    return int(batch.num_tokens)


def _expanded_rows(spec: Any, batch: Any, k: Any) -> int:
    # Draft model: the target's rows plus one correction slot per request.
    return int(batch.num_tokens) + int(batch.num_reqs) * int(getattr(spec, "num_extra_query_per_req", 1))


def _buffer_rows(spec: Any) -> int | None:
    return _rows(getattr(getattr(spec, "input_buffers", None), "input_ids", None))


def _expanded_buffer_rows(spec: Any) -> int | None:
    return _rows(getattr(spec, "expanded_input_ids", None)) or _buffer_rows(spec)


SPECULATOR_RULES: dict[str, Rule] = {
    "DFlashSpeculator": ("query", _query_rows, _buffer_rows),  # DSpark, DFlash2, XPress, LiLiCorr too
    "TargetDependentARSpeculator": ("target", _target_rows, _buffer_rows),  # EAGLE, MTP, Gemma4
    "MultiModuleMTPSpeculator": ("target", _target_rows, _buffer_rows),
    "StandaloneARSpeculator": ("expanded", _expanded_rows, _expanded_buffer_rows),
}
# Speculators that run no forward pass over a token buffer: nothing to note.
NO_FORWARD_SPECULATORS = frozenset(
    {"NgramGPUSpeculator", "SuffixSpeculator", "ExtractHiddenStatesSpeculator"}  # suffix: V2 since 0.34
)
DISPATCH = "dispatch_cg_and_sync_dp"


def speculator_rule(cls: type) -> tuple[str, Rule | None]:
    """(base class name, rule) for a speculator class, from its MRO; rule None when its
    rows are not noted (no forward pass, or a class this hook does not know)."""
    for base in cls.__mro__:
        if base.__name__ in SPECULATOR_RULES:
            return base.__name__, SPECULATOR_RULES[base.__name__]
        if base.__name__ in NO_FORWARD_SPECULATORS:
            return base.__name__, None
    return cls.__name__, None


def patch_speculator_class(cls: type) -> str | None:
    """Hook a V2 speculator class's propose(); returns its rule name (None: not noted)."""
    try:
        base, rule = speculator_rule(cls)
        if rule is None:
            _set_state(speculator=_qualname(cls), speculator_rows=None)
            if base not in NO_FORWARD_SPECULATORS:
                _inactive(
                    f"speculator {_qualname(cls)} derives from no known base: its draft rows are not noted"
                )
            return None
        propose = getattr(cls, "propose", None)
        batch = _argument(propose, "input_batch")
        dummy = _argument(propose, "dummy_run", False)
        k = _argument(propose, "num_speculative_tokens")
        if batch is None or dummy is None:
            _set_state(speculator=_qualname(cls), speculator_rows=None)
            _inactive(f"{_qualname(cls)}.propose(input_batch, …, dummy_run) moved: draft rows not noted")
            return None
        if not getattr(propose, _PATCHED, False):  # an inherited propose may be hooked already
            cls.propose = _wrap_propose(propose, rule, batch, dummy, k)
        if _hook_dispatch(inspect.unwrap(propose)):
            _pass_padded("draft")
        elif rule[0] != "expanded":  # the draft model runs eagerly, with no dispatch to see
            _inactive(f"{DISPATCH} not found where {_qualname(cls)}.propose runs: draft padding not recorded")
        _set_state(speculator=_qualname(cls), speculator_rows=rule[0])
        return rule[0]
    except Exception:
        _fault(f"patch speculator {cls!r}")
        return None


def _wrap_propose(orig: Any, rule: Rule, batch_arg: Any, dummy_arg: Any, k_arg: Any) -> Any:
    _, rows_of, capacity_of = rule

    @functools.wraps(orig)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _in_propose
        note = None
        try:
            if not dummy_arg(args, kwargs):
                batch = batch_arg(args, kwargs)
                k = k_arg(args, kwargs) if k_arg is not None else None
                note = (rows_of(self, batch, k), capacity_of(self), int(batch.num_reqs))
                _dispatched.clear()
                _in_propose = True
        except Exception:
            _fault("speculator.propose")
        try:
            return orig(self, *args, **kwargs)
        finally:
            if note is not None:
                _in_propose = False
                try:
                    rows, cap, reqs = note
                    padded = _dispatched[0] if _dispatched else None
                    _notes.append(
                        RunnerNote(
                            pass_="draft", rows=rows, cap=cap, reqs=reqs, padded=padded, notes_padding=True
                        )
                    )
                except Exception:
                    _fault("speculator.propose")

    setattr(propose, _PATCHED, True)
    return propose


def _hook_dispatch(func: Any) -> bool:
    """Wrap the cudagraph/DP dispatch that `func`'s module calls, to see the padded size
    it picks (BatchExecutionDescriptor.num_tokens); True if it is hooked."""
    module_globals = getattr(func, "__globals__", None)
    dispatch = module_globals.get(DISPATCH) if isinstance(module_globals, dict) else None
    if not callable(dispatch):
        return False
    if not getattr(dispatch, _PATCHED, False):
        module_globals[DISPATCH] = _wrap_dispatch(dispatch)
    return True


def _wrap_dispatch(orig: Any) -> Any:
    @functools.wraps(orig)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        result = orig(*args, **kwargs)
        if _in_propose:
            try:
                _dispatched.append(int(result[0].num_tokens))
            except Exception:
                _fault(DISPATCH)
        return result

    setattr(dispatch, _PATCHED, True)
    return dispatch
