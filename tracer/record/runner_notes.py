"""What a model-runner process hands back to EngineCore: the notes of each forward pass and,
when it changed, this process's hook state.

The model runner often lives in another process than the scheduler (on CPU
vLLM always uses the `mp` executor: EngineCore and a Worker process). So the
hooks write nothing themselves. They note what each pass was handed, and those
notes are attached to the step's ModelRunnerOutput as `_schedscope_runner`. Pickle
carries instance attributes, so the notes travel back to EngineCore, where
the recorder's update_from_output() hook turns them into `runner` records of
the right step. One writer, one file, no step-number guessing.

Which hooks are active is known only here, in the runner's process. So this
process's hook state travels with the first notes after it changes, as
`_schedscope_hooks`, and the recorder writes it as a `hooks` record.

Also what the runner and speculator hooks (tracer.record.runner_hook,
tracer.record.speculator_hook) share: one warning per hook that cannot work, one
fault count, and the readers they take vLLM's objects apart with.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

from tracer.record.snapshot import RUNNER_HOOKS_ATTR, RUNNER_NOTES_ATTR, RunnerNote

logger = logging.getLogger("schedscope.runner_hook")

ATTR = RUNNER_NOTES_ATTR
HOOKS_ATTR = RUNNER_HOOKS_ATTR
PATCHED = "_schedscope_patched"

# The passes noted since the current step's execute_model. The runner calls
# execute_model/sample_tokens from one thread: no lock.
passes: list[RunnerNote] = []
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


# -- state, warnings, faults ------------------------------------------------------------
def set_state(**changes: Any) -> None:
    global _state_dirty
    for key, value in changes.items():
        if _state.get(key) != value:
            _state[key] = value
            _state_dirty = True


def mark_inactive(reason: str) -> None:
    """A hook that cannot work on this vLLM: one warning, and listed in the hooks record."""
    global _state_dirty
    if reason in _warned:
        return
    _warned.add(reason)
    _state["inactive"] = [*_state["inactive"], reason]
    _state_dirty = True
    logger.warning("schedscope: %s; vLLM runs unaffected", reason)


def pass_padded(pass_: str) -> None:
    if pass_ not in _state["padded"]:
        set_state(padded=[p for p in ("target", "draft") if p == pass_ or p in _state["padded"]])


def hook_state() -> dict[str, Any]:
    """A copy of this process's hook state (what a `hooks` record carries)."""
    padded, inactive = list(_state["padded"]), list(_state["inactive"])
    return {**_state, "padded": padded, "inactive": inactive, "pid": os.getpid()}


def fault(where: str) -> None:
    global _failures
    _failures += 1
    if _failures == 1:
        logger.exception("schedscope: runner hook error in %s; the model runs unaffected", where)


# -- reading vLLM's objects ----------------------------------------------------------------
def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def rows_in(buffer: Any) -> int | None:
    """First dimension of a runner buffer (CpuGpuBuffer or tensor), if it has one."""
    for candidate in (getattr(buffer, "gpu", None), getattr(buffer, "cpu", None), buffer):
        shape = getattr(candidate, "shape", None)
        if shape:
            return int(shape[0])
    return None


def argument_reader(func: Any, name: str, default: Any = None) -> Callable[[tuple, dict], Any] | None:
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


# -- handing the notes back ----------------------------------------------------------------
def attach(output: Any) -> Any:
    """Hand the notes (and the hook state, if it changed) to the output that goes back
    to the scheduler; clear them."""
    global _state_dirty
    if not passes or output is None:
        return output
    notes = list(passes)
    passes.clear()
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
        fault("attach")
    return output


def _mark(output: Any, notes: list[RunnerNote], hooks: dict[str, Any] | None) -> None:
    setattr(output, ATTR, notes)
    if hooks is not None:
        setattr(output, HOOKS_ATTR, hooks)
