"""How far a replay is from the run it re-makes: the identity check behind every what-if.

`check_fidelity(trace)` replays a trace under the policy and scheduler class it
was recorded with and compares the two step by step on every scheduling
decision: the requests scheduled and their tokens and drafts, admissions,
resumptions, preemptions, finishes, the tokens sampled, the budgets and the
inputs the scheduler received. Timestamps are not decisions and are left out.
A what-if's effect is only as trustworthy as this check: `diff` prints it next
to the policy's effect.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.analysis import why
from tracer.opening.door import Spec, open_input
from tracer.trace import schema
from tracer.trace.trace_type import Trace
from tracer.whatif.notes import Note, OtherVllm

# Step fields that are scheduling decisions or their inputs. Sets (vLLM keeps
# preempted and finished ids in sets, in hash order) are compared as sets.
_FIELDS = (
    "target",
    "input",
    "query",
    "new",
    "resumed",
    "running",
    "unscheduled",
    "waiting_demand",
    "num_waiting",
    "num_running",
    "sampled",
    "ends",
    "inputs",
)
_SETS = ("preempted", "finished")


def _normal_inputs(inputs: list[Any] | None, sampled: dict[int, dict[str, int]]) -> list[Any] | None:
    """Inputs as the scheduler sees them: ids in aborts and drafts come in set or batch
    order, which it ignores, and it drops drafts for a request still in prefill (one
    that sampled nothing in the step just updated)."""
    if inputs is None:
        return None
    out: list[Any] = []
    last: dict[str, int] = {}
    for event in inputs:
        kind = event[0]
        if kind == "x":
            event = ["x", sorted(event[1]) if event[1] is not None else None, event[2]]
        elif kind == "d":
            pairs = zip(event[1], event[2], strict=False)
            event = ["d", sorted((rid, n) for rid, n in pairs if last.get(rid, 0) > 0)]
        elif kind == "u":
            last = sampled.get(event[1], {})
        out.append(event)
    return out


def decisions(step: dict[str, Any], sampled: dict[int, dict[str, int]] | None = None) -> dict[str, Any]:
    """The parts of a step record a faithful replay must reproduce (`sampled`: each step's
    sampled tokens, by step number, to read its drafts as the scheduler does)."""
    out = {name: step.get(name) for name in _FIELDS}
    out["inputs"] = _normal_inputs(out["inputs"], sampled or {})
    if not (step.get("new") or step.get("resumed") or step.get("running")):
        out["sampled"] = {}  # nothing ran: no output to record, whether or not one came back
    for name in _SETS:
        out[name] = sorted(step.get(name) or ())
    return out


def _sampled_by_step(steps: list[dict[str, Any]]) -> dict[int, dict[str, int]]:
    return {int(s["step"]): s.get("sampled") or {} for s in steps}


@dataclass
class Divergence:
    step: int
    fields: dict[str, tuple[Any, Any]]  # name -> (recorded, replayed)


@dataclass
class Fidelity:
    recorded_steps: int
    replayed_steps: int
    identical_steps: int
    recorded_tokens: int
    replayed_tokens: int
    first: Divergence | None
    policy: str
    exact_workload: bool
    notes: list[Note] = field(default_factory=list)  # worded by tracer.render.notes

    @property
    def identical(self) -> bool:
        return self.first is None and self.recorded_steps == self.replayed_steps

    @property
    def identical_share(self) -> float:
        return self.identical_steps / max(self.recorded_steps, 1)

    def as_header(self) -> dict[str, Any]:
        """What a what-if's trace keeps of its baseline's identity check."""
        return {
            "identical": self.identical,
            "recorded_steps": self.recorded_steps,
            "replayed_steps": self.replayed_steps,
            "identical_steps": self.identical_steps,
            "recorded_tokens": self.recorded_tokens,
            "replayed_tokens": self.replayed_tokens,
            "first_divergent_step": None if self.first is None else self.first.step,
            "exact_workload": self.exact_workload,
        }


def compare_runs(
    recorded: Trace, replayed: Trace, *, policy: str, exact: bool, notes: list[Note]
) -> Fidelity:
    a, b = recorded.steps(), replayed.steps()
    sa, sb = _sampled_by_step(a), _sampled_by_step(b)
    identical = 0
    first: Divergence | None = None
    # A 1.3 recording's "why" facts (free KV blocks, prefix hits, skipped states, preemptions'
    # triggers and lost work) must be re-made too: `why --exact` probes the replay's state.
    why_keys = schema.WHY_STEP_KEYS if why.has_why_fields(recorded) else ()
    for x, y in zip(a, b, strict=False):
        dx, dy = decisions(x, sa), decisions(y, sb)
        for key in why_keys:
            if x.get(key) is not None or key != "kv_free":  # kv_free is null where unreadable
                dx[key], dy[key] = x.get(key), y.get(key)
        if dx == dy:
            identical += 1
        elif first is None:
            first = Divergence(int(x["step"]), {k: (dx[k], dy[k]) for k in dx if dx[k] != dy[k]})
    if first is None and len(a) != len(b):
        longer = a if len(a) > len(b) else b
        first = Divergence(int(longer[min(len(a), len(b))]["step"]), {"steps": (len(a), len(b))})
    return Fidelity(
        recorded_steps=len(a),
        replayed_steps=len(b),
        identical_steps=identical,
        recorded_tokens=int(recorded.columns["target_used"].sum()),
        replayed_tokens=int(replayed.columns["target_used"].sum()),
        first=first,
        policy=policy,
        exact_workload=exact,
        notes=notes,
    )


def check_fidelity(trace: Trace | str | Path, *, out: str | Path | None = None) -> Fidelity:
    """Replay `trace` under its recorded policy and scheduler class; compare. Needs vLLM."""
    from tracer.whatif.replay import replay
    from tracer.whatif.workload import workload_from_trace

    recorded = trace if isinstance(trace, Trace) else open_input(Spec(traces=(trace,))).session.trace
    workload = workload_from_trace(recorded)
    policy = str(recorded.header.get("policy") or "stock")
    notes = list(workload.notes)
    recorded_on = recorded.header.get("vllm_version")
    try:
        import vllm

        here = str(getattr(vllm, "__version__", ""))
    except ImportError:  # pragma: no cover - replay needs vLLM anyway
        here = ""
    if recorded_on and here and recorded_on.split(".")[:2] != here.split(".")[:2]:
        notes.append(OtherVllm(str(recorded_on), here))
    with tempfile.TemporaryDirectory(prefix="schedscope-fidelity-") as tmp:
        path = Path(out) if out is not None else Path(tmp) / "identity.jsonl"
        replay(workload, policy, path)
        replayed = open_input(Spec(traces=(path,))).session.trace
    return compare_runs(recorded, replayed, policy=policy, exact=workload.exact, notes=notes)
