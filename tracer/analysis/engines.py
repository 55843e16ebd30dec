"""Several traces of one run: a data-parallel server writes one trace per engine.

`SCHEDSCOPE_TRACE=/tmp/run.{pid}.jsonl` gives each EngineCore its own file. `summary`, `flags`
and both viewers take them together as one `Run`: one Session per engine, in the order given,
each labelled by the EngineCore's pid, plus the totals of the whole run.

Traces that are not one run (another model, budget or vLLM) are refused with the file and the
header field that differs: engines of one server share every one of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.analysis.memo import Memo, joint_memo
from tracer.analysis.session import Session
from tracer.trace.errors import TraceHeaderError
from tracer.trace.trace_type import Trace

# Header fields every engine of one server shares; (section, key): section None is the header.
SHARED = (
    (None, "vllm_version"),
    (None, "scheduler_cls"),
    (None, "policy"),
    ("config", "model"),
    ("config", "max_num_batched_tokens"),
    ("config", "max_num_seqs"),
    ("config", "spec_method"),
    ("config", "num_speculative_tokens"),
    ("config", "async_scheduling"),
)


@dataclass(frozen=True)
class Engine:
    label: str  # "engine 0 (pid 5918)": the lane's name in every view
    session: Session

    @property
    def trace(self) -> Trace:
        return self.session.trace


@dataclass(frozen=True)
class RunTotals:
    engines: int
    steps: int
    target_tokens: int
    preempted: int
    withheld: int
    flags: int


@dataclass(frozen=True)
class Axis:
    """The engines on one step axis: each EngineCore numbers its own steps, and the axis is
    every step number any engine recorded, so step k of each engine sits in one column."""

    steps: np.ndarray  # sorted step numbers
    at: list[np.ndarray] = field(default_factory=list)  # engine i's rows' places on the axis

    def place(self, engine: int, values: np.ndarray, missing: int | float = 0) -> np.ndarray:
        """An engine's per-row array on the axis; `missing` where it recorded no such step."""
        out = np.full(len(self.steps), missing, dtype=values.dtype)
        out[self.at[engine]] = values
        return out

    def row_of(self, step: int) -> int | None:
        row = int(np.searchsorted(self.steps, step))
        return row if row < len(self.steps) and int(self.steps[row]) == step else None


@dataclass(frozen=True)
class Run:
    engines: list[Engine]

    @property
    def memo(self) -> Memo:
        """What the run's engines give together, kept for their Sessions (tracer.analysis.memo)."""
        return joint_memo(*(e.session for e in self.engines))

    @property
    def axis(self) -> Axis:
        return self.memo.once("axis", self._axis)

    def _axis(self) -> Axis:
        columns = [e.trace.columns["step"] for e in self.engines]
        steps = np.unique(np.concatenate(columns)) if columns else np.zeros(0, np.int64)
        return Axis(steps, [np.searchsorted(steps, c) for c in columns])

    @classmethod
    def of(cls, sessions: Sequence[Session | Trace]) -> Run:
        sessions = [Session.of(s) for s in sessions]
        check_one_run([s.trace for s in sessions])
        return cls([Engine(label(i, s.trace), s) for i, s in enumerate(sessions)])

    def totals(self) -> RunTotals:
        return self.memo.once("totals", self._totals)  # every view asks for the same numbers

    def _totals(self) -> RunTotals:
        traces = [e.trace for e in self.engines]
        return RunTotals(
            engines=len(self.engines),
            steps=sum(len(t) for t in traces),
            target_tokens=sum(int(t.columns["target_used"].sum()) for t in traces),
            preempted=sum(int(t.columns["n_preempted"].sum()) for t in traces),
            withheld=sum(e.session.report.tokens_withheld for e in self.engines),
            flags=sum(len(e.session.report.flags) for e in self.engines),
        )


def label(index: int, trace: Trace) -> str:
    pid = trace.header.get("pid")
    return f"engine {index} (pid {pid})" if pid is not None else f"engine {index} ({Path(trace.path).name})"


def check_one_run(traces: Sequence[Trace]) -> None:
    """Raise TraceHeaderError (naming the file and field) unless every trace is an engine of one server."""
    if not traces:
        raise ValueError("no traces")
    first = traces[0]
    for trace in traces[1:]:
        for section, key in SHARED:
            a = first.header if section is None else first.header.get(section, {})
            b = trace.header if section is None else trace.header.get(section, {})
            if a.get(key) != b.get(key):
                name = key if section is None else f"{section}.{key}"
                raise TraceHeaderError(
                    trace.path,
                    f"not an engine of the same run as {first.path}: "
                    f"{b.get(key)!r} here, {a.get(key)!r} there",
                    line=1,
                    field=name,
                )
    pids = [t.header.get("pid") for t in traces]
    for i, pid in enumerate(pids):
        if pid is not None and pid in pids[:i]:
            other = traces[pids.index(pid)].path
            message = f"the same engine (pid {pid}) as {other}"
            raise TraceHeaderError(traces[i].path, message, line=1, field="pid")


class ReadsRun:
    """What a view's wrapper of a Run (tui.data.RunModel, web.model.RunView) reads through,
    never copies: the shared step axis and the run's totals."""

    run: Run

    @property
    def steps(self) -> np.ndarray:
        return self.run.axis.steps

    @property
    def at(self) -> list[np.ndarray]:
        """Engine i's rows' places on the axis."""
        return self.run.axis.at

    @property
    def totals(self) -> RunTotals:
        return self.run.totals()
