"""V2 speculators' hook: the draft rows of each speculator's first forward pass, and the
padded size its cudagraph/DP dispatch picked.

A speculator's rows are noted by the rule of the vLLM base class it derives from
(SPECULATOR_RULES); its propose() is patched once per class, when a V2 runner
(tracer.record.runner_hook) first runs with it. The notes go back with the
runner's (tracer.record.runner_notes). Nothing here ever raises into the runner.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from tracer.record.runner_notes import (
    PATCHED,
    argument_reader,
    fault,
    mark_inactive,
    pass_padded,
    passes,
    qualname,
    rows_in,
    set_state,
)
from tracer.record.snapshot import RunnerNote

# The speculator's propose() in flight (a note is pending) and the padded sizes its
# cudagraph dispatch picked meanwhile; the first one is the query (or prefill) pass.
_in_propose = False
_dispatched: list[int] = []


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
    return rows_in(getattr(getattr(spec, "input_buffers", None), "input_ids", None))


def _expanded_buffer_rows(spec: Any) -> int | None:
    return rows_in(getattr(spec, "expanded_input_ids", None)) or _buffer_rows(spec)


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
            set_state(speculator=qualname(cls), speculator_rows=None)
            if base not in NO_FORWARD_SPECULATORS:
                mark_inactive(
                    f"speculator {qualname(cls)} derives from no known base: its draft rows are not noted"
                )
            return None
        propose = getattr(cls, "propose", None)
        batch = argument_reader(propose, "input_batch")
        dummy = argument_reader(propose, "dummy_run", False)
        k = argument_reader(propose, "num_speculative_tokens")
        if batch is None or dummy is None:
            set_state(speculator=qualname(cls), speculator_rows=None)
            mark_inactive(f"{qualname(cls)}.propose(input_batch, …, dummy_run) moved: draft rows not noted")
            return None
        if not getattr(propose, PATCHED, False):  # an inherited propose may be hooked already
            cls.propose = _wrap_propose(propose, rule, batch, dummy, k)
        if _hook_dispatch(inspect.unwrap(propose)):
            pass_padded("draft")
        elif rule[0] != "expanded":  # the draft model runs eagerly, with no dispatch to see
            mark_inactive(
                f"{DISPATCH} not found where {qualname(cls)}.propose runs: draft padding not recorded"
            )
        set_state(speculator=qualname(cls), speculator_rows=rule[0])
        return rule[0]
    except Exception:
        fault(f"patch speculator {cls!r}")
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
            fault("speculator.propose")
        try:
            return orig(self, *args, **kwargs)
        finally:
            if note is not None:
                _in_propose = False
                try:
                    rows, cap, reqs = note
                    padded = _dispatched[0] if _dispatched else None
                    passes.append(
                        RunnerNote(
                            pass_="draft", rows=rows, cap=cap, reqs=reqs, padded=padded, notes_padding=True
                        )
                    )
                except Exception:
                    fault("speculator.propose")

    setattr(propose, PATCHED, True)
    return propose


def _hook_dispatch(func: Any) -> bool:
    """Wrap the cudagraph/DP dispatch that `func`'s module calls, to see the padded size
    it picks (BatchExecutionDescriptor.num_tokens); True if it is hooked."""
    module_globals = getattr(func, "__globals__", None)
    dispatch = module_globals.get(DISPATCH) if isinstance(module_globals, dict) else None
    if not callable(dispatch):
        return False
    if not getattr(dispatch, PATCHED, False):
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
                fault(DISPATCH)
        return result

    setattr(dispatch, PATCHED, True)
    return dispatch
