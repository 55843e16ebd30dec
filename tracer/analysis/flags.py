"""Flag detectors: accounting faults found in a trace, each with the numbers behind it.
All budget reasoning comes from tracer.analysis.budget; this module only decides what is
worth a flag. The sentence a user reads of each kind is worded in tracer.render.flags, from
the columns and the constants (`context`) a detector keeps here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

import numpy as np

from tracer.analysis import detail, step_bindings
from tracer.analysis.budget import BudgetAnalysis, analyze
from tracer.analysis.reasons import CODES, REASONS
from tracer.trace.trace_type import Trace

ADDITIVE = "additive-double-reservation"
QUERY_OVERFLOW = "query-overflow"
SHARED_OVERFLOW = "shared-buffer-overflow"
NEGATIVE = "negative-budget"
PREEMPTION_LEAK = "preemption-budget-leak"
CAP_BINDING = "admission-cap-binding"
LIMIT_HOLDS = "limit-holds-waiting"


class KindInfo(NamedTuple):
    """What every view shows of a flag kind: its severity, a short name for a chart's legend
    and axis, and its markers' colour."""

    severity: str  # "error", "warning" or "info"
    short: str
    color: str


# The one list of flag kinds, in the order flags of one step sort and views list them. A new
# kind is one entry here (and its detector below); KINDS, SEVERITY and every view follow.
KIND_INFO: dict[str, KindInfo] = {
    ADDITIVE: KindInfo("warning", "additive", "#d62728"),
    QUERY_OVERFLOW: KindInfo("error", "query overflow", "#9467bd"),
    SHARED_OVERFLOW: KindInfo("error", "shared overflow", "#8c564b"),
    NEGATIVE: KindInfo("error", "negative", "#e377c2"),
    PREEMPTION_LEAK: KindInfo("error", "preempt leak", "#ff7f0e"),
    CAP_BINDING: KindInfo("info", "cap binding", "#17becf"),
    LIMIT_HOLDS: KindInfo("warning", "limit holds", "#bcbd22"),
}
KINDS = tuple(KIND_INFO)
SEVERITY = {kind: info.severity for kind, info in KIND_INFO.items()}
# A flag's mark in the text views, by severity.
GLYPH = {"error": "✖", "warning": "▲", "info": "●"}


def kind_info(kind: str) -> KindInfo:
    """A kind's entry; one this build does not know (a newer trace's, a plugin's) still draws."""
    return KIND_INFO.get(kind) or KindInfo("info", kind, "#7f7f7f")


def glyph(severity: str) -> str:
    return GLYPH.get(severity, "?")


# A limit "holds requests back while budget and KV sit idle" when at least this share of the
# target budget is left and at most this share of the KV cache is in use.
IDLE_BUDGET_SHARE = 0.25
BUSY_KV_SHARE = 0.9


# How a view gets sentences: (kind, its detector's context, its columns as lists) -> a
# sentence per flag. tracer.render.flags.messages passes the product's own.
Wording = Callable[[str, Mapping[str, Any], list[list[Any]]], list[str]]


@dataclass(frozen=True)
class Flag:
    step: int
    kind: str
    severity: str
    numbers: dict[str, Any] = field(default_factory=dict)
    # What its sentence is worded from: its values in its kind's column order, and its
    # detector's constants (tracer.render.flags words them).
    facts: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    context: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # A flag made elsewhere (a plugin's, a test's) brings its own sentence.
    text: str | None = None


class _Batch:
    """One detector's flags of one kind as columns. The sentences are worded when first read,
    all at once (a busy server's trace can flag most of its steps); a Flag object only when
    one is asked for."""

    def __init__(
        self,
        kind: str,
        steps: np.ndarray,
        columns: tuple[np.ndarray | list[Any], ...],
        numbers: Callable[..., dict[str, Any]],
        context: Mapping[str, Any] | None = None,
        withheld: np.ndarray | None = None,
    ) -> None:
        """`numbers(*one flag's values)`: the numbers behind it; `context`: the detector's
        constants its sentences need; `withheld`: the target tokens each flag says were
        withheld (the additive kind's)."""
        self.kind = kind
        self._withheld = withheld
        self.steps = np.asarray(steps, dtype=np.int64)
        self._columns = columns
        self._numbers = numbers
        self.context: Mapping[str, Any] = context or {}
        self._values: list[list[Any]] | None = None
        self._said: list[str] | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def kinds(self) -> np.ndarray:
        out = np.empty(len(self), dtype=object)
        out[:] = self.kind  # the one str in every cell (np.full would make a copy per cell)
        return out

    def ranks(self, rank: dict[str, int]) -> np.ndarray:
        return np.full(len(self), rank.get(self.kind, len(rank)), dtype=np.int64)

    def severities(self) -> list[str]:
        return [SEVERITY[self.kind]] * len(self)

    def _lists(self) -> list[list[Any]]:
        if self._values is None:
            self._values = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in self._columns]
        return self._values

    def sentences(self, word: Wording) -> list[str]:
        # Worded once: there is one wording (tracer.render.flags'), and views re-read often.
        if self._said is None:
            self._said = word(self.kind, self.context, self._lists())
        return self._said

    def flag(self, i: int) -> Flag:
        if self._values is None:  # one flag read (a summary's first): no whole-column lists
            v = [c[i].item() if isinstance(c, np.ndarray) else c[i] for c in self._columns]
        else:
            v = [c[i] for c in self._values]
        return Flag(
            int(self.steps[i]), self.kind, SEVERITY[self.kind], self._numbers(*v), tuple(v), self.context
        )

    def counts(self) -> Counter[str]:
        return Counter({self.kind: len(self)})

    def withheld(self) -> np.ndarray:
        if self._withheld is None:
            return np.zeros(len(self), dtype=np.int64)
        return np.asarray(self._withheld, dtype=np.int64)


class _Listed:
    """Flags already made (a plugin's, a test's), in the order given."""

    def __init__(self, flags: list[Flag]) -> None:
        self._flags = flags
        self.steps = np.fromiter((f.step for f in flags), np.int64, len(flags))

    def __len__(self) -> int:
        return len(self._flags)

    def kinds(self) -> np.ndarray:
        out = np.empty(len(self._flags), dtype=object)
        out[:] = [f.kind for f in self._flags]
        return out

    def ranks(self, rank: dict[str, int]) -> np.ndarray:
        return np.asarray([rank.get(f.kind, len(rank)) for f in self._flags], dtype=np.int64)

    def severities(self) -> list[str]:
        return [f.severity for f in self._flags]

    def sentences(self, word: Wording) -> list[str]:
        return [
            f.text if f.text is not None else word(f.kind, f.context, [[x] for x in f.facts])[0]
            for f in self._flags
        ]

    def flag(self, i: int) -> Flag:
        return self._flags[i]

    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self._flags)

    def withheld(self) -> np.ndarray:
        got = [f.numbers.get("tokens_withheld", 0) if f.kind == ADDITIVE else 0 for f in self._flags]
        return np.asarray(got, dtype=np.int64)


class FlagList(Sequence[Flag]):
    """A trace's flags, by step (and by kind within a step), held as columns.

    `steps` and `kinds` are arrays over all of them; a Flag object is made only when one is
    read (an index, a slice, iteration), so a trace with a flag on each of 200,000 steps
    costs its columns, not 200,000 objects, until a view shows them."""

    def __init__(self, batches: list[_Batch | _Listed], *, ordered: bool = False) -> None:
        self._batches = [b for b in batches if len(b)]
        parts = self._batches
        if parts:
            steps = np.concatenate([b.steps for b in parts])
            kinds = np.concatenate([b.kinds() for b in parts])
            which = np.repeat(np.arange(len(parts), dtype=np.int32), [len(b) for b in parts])
            pos = np.concatenate([np.arange(len(b), dtype=np.int64) for b in parts])
        else:
            steps, kinds = np.zeros(0, np.int64), np.zeros(0, dtype=object)
            which, pos = np.zeros(0, np.int32), np.zeros(0, np.int64)
        if not ordered:
            rank = {kind: i for i, kind in enumerate(KINDS)}
            ranks = np.concatenate([b.ranks(rank) for b in parts] or [np.zeros(0, np.int64)])
            order = np.lexsort((ranks, steps))  # stable: a detector's own order within a (step, kind)
            steps, kinds, which, pos = steps[order], kinds[order], which[order], pos[order]
        self.steps: np.ndarray = steps
        self.kinds: np.ndarray = kinds  # object array of kind names
        self._which, self._pos = which, pos
        self._identity = bool((pos == np.arange(len(pos))).all())

    @classmethod
    def of(cls, flags: Iterable[Flag]) -> FlagList:
        """Flags already made, kept in the order given."""
        return cls([_Listed(list(flags))], ordered=True)

    def __len__(self) -> int:
        return len(self.steps)

    @overload
    def __getitem__(self, i: int) -> Flag: ...
    @overload
    def __getitem__(self, i: slice) -> list[Flag]: ...
    def __getitem__(self, i: int | slice) -> Flag | list[Flag]:
        if isinstance(i, slice):
            return [self._flag(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._flag(i)

    def _flag(self, i: int) -> Flag:
        return self._batches[self._which[i]].flag(int(self._pos[i]))

    def __iter__(self) -> Iterator[Flag]:
        batches, pos = self._batches, self._pos.tolist()
        for b, p in zip(self._which.tolist(), pos, strict=True):
            yield batches[b].flag(p)

    def take(self, positions: np.ndarray) -> list[Flag]:
        return [self._flag(int(i)) for i in positions]

    def positions(self, kinds: Iterable[str] | None = None) -> np.ndarray:
        """Positions of the flags of `kinds` (all when None)."""
        if kinds is None:
            return np.arange(len(self))
        return np.flatnonzero(np.isin(self.kinds, list(kinds)))

    def sentences(self, word: Wording) -> list[str]:
        """Every flag's sentence as `word` words it, in order (in bulk: no Flag objects).
        Views call tracer.render.flags.messages, which passes the product's wording."""
        return self._in_order([b.sentences(word) for b in self._batches])

    def severities(self) -> list[str]:
        return self._in_order([b.severities() for b in self._batches])

    def _in_order(self, per: list[list[Any]]) -> list[Any]:
        if len(per) == 1 and self._identity:  # one detector flagged: already in order
            return per[0]
        return [per[b][p] for b, p in zip(self._which.tolist(), self._pos.tolist(), strict=True)]

    def counts(self) -> dict[str, int]:
        """Flags per kind, kinds in order of their first flag."""
        first = np.full(len(self._batches), len(self), dtype=np.int64)
        np.minimum.at(first, self._which, np.arange(len(self)))
        out: Counter[str] = Counter()
        for b in np.argsort(first, kind="stable").tolist():
            out.update(self._batches[b].counts())
        return dict(out)

    def withheld(self) -> np.ndarray:
        """Target tokens each flag says the additive reservation withheld (0 for other kinds)."""
        if not self._batches:
            return np.zeros(0, np.int64)
        return np.concatenate([b.withheld() for b in self._batches])[self._order_index()]

    def _order_index(self) -> np.ndarray:
        starts = np.cumsum([0] + [len(b) for b in self._batches])[:-1]
        return starts[self._which] + self._pos


@dataclass
class FlagReport:
    flags: FlagList
    analysis: BudgetAnalysis

    @property
    def tokens_withheld(self) -> int:
        """Target tokens the additive reservation withheld, over all its flags."""
        return int(self.flags.withheld().sum())

    def counts(self) -> dict[str, int]:
        """Flags per kind, kinds in order of their first flag."""
        return self.flags.counts()


def detect(
    trace: Trace, analysis: BudgetAnalysis | None = None, *, bindings: np.ndarray | None = None
) -> FlagReport:
    """Every flag of the trace; `bindings` (tracer.analysis.step_bindings.bindings) when already computed."""
    analysis = analysis or analyze(trace)
    batches: list[_Batch | _Listed] = []
    finders = (_additive, _query_overflow, _shared_overflow, _negative, _preemption_leak, _cap_binding)
    for finder in finders:
        batches.extend(finder(trace, analysis))
    batches.extend(_limit_holds(trace, step_bindings.bindings(trace) if bindings is None else bindings))
    return FlagReport(FlagList(batches), analysis)


def _additive(trace: Trace, a: BudgetAnalysis) -> list[_Batch]:
    m = a.model
    if not m.separate_pass:
        return []
    col = trace.columns
    rows = np.flatnonzero(a.withheld > 0)

    def numbers(
        withheld: int, excess: int, used: int, exact: bool, reserved: int, needed: int, target_cap: int,
        input_used: int, input_cap: int,
    ) -> dict[str, Any]:  # fmt: skip
        return {
            "tokens_withheld": withheld,
            "exact": exact,
            "reserved": reserved,
            "needed": needed,
            "target_used": used,
            "target_cap": target_cap,
            "input_used": input_used,
            "input_cap": input_cap,
        }

    columns = tuple(
        arr[rows]
        for arr in (
            a.withheld, a.excess, col["target_used"], a.exact, a.reserved, a.needed, col["target_cap"],
            col["input_used"], col["input_cap"],
        )
    )  # fmt: skip
    context = {"method": m.method, "k": m.k, "q": m.q}
    return [_Batch(ADDITIVE, col["step"][rows], columns, numbers, context, withheld=columns[0])]


def _query_overflow(trace: Trace, a: BudgetAnalysis) -> list[_Batch]:
    if not a.model.separate_pass or not a.model.q:
        return []
    col = trace.columns
    rows = np.flatnonzero((a.query_cap > 0) & (a.query_rows > a.query_cap))
    q = a.model.q

    def numbers(query_rows: int, query_cap: int) -> dict[str, Any]:
        return {"query_rows": query_rows, "query_cap": query_cap, "per_req": q}

    return [
        _Batch(
            QUERY_OVERFLOW,
            col["step"][rows],
            (a.query_rows[rows], a.query_cap[rows]),
            numbers,
            {"q": q},
        )
    ]


def _shared_overflow(trace: Trace, a: BudgetAnalysis) -> list[_Batch]:
    m = a.model
    if m.separate_pass or not m.draft_slots or not m.buffer_capacity:
        return []
    col = trace.columns
    rows = col["target_used"] + a.needed
    over = rows > m.buffer_capacity
    drafted = trace.runner["draft_rows"] > trace.runner["draft_cap"]
    over |= drafted & (trace.runner["draft_cap"] >= 0)
    at = np.flatnonzero(over)
    capacity = m.buffer_capacity

    def numbers(n: int) -> dict[str, Any]:
        return {"rows": n, "buffer_capacity": capacity}

    context = {"method": m.method, "capacity": capacity}
    return [_Batch(SHARED_OVERFLOW, col["step"][at], (rows[at],), numbers, context)]


def _negative(trace: Trace, a: BudgetAnalysis) -> list[_Batch]:
    col = trace.columns
    out = []
    for name in ("target", "input"):
        rows = np.flatnonzero(col[f"{name}_left"] < 0)

        def numbers(left: int, cap: int, name: str = name) -> dict[str, Any]:
            return {"budget": name, "left": left, "cap": cap}

        cells = (col[f"{name}_left"][rows], col[f"{name}_cap"][rows])
        out.append(_Batch(NEGATIVE, col["step"][rows], cells, numbers, {"budget": name}))
    return out


def _preemption_leak(trace: Trace, a: BudgetAnalysis) -> list[_Batch]:
    """A request preempted in a step must hold none of that step's budget."""
    col = trace.columns
    charged = col["new_tokens"] + col["resumed_tokens"] + col["running_tokens"]
    mismatch = (col["input_used"] != col["target_used"] + col["input_reserved"]) | (
        charged != col["target_used"]
    )
    # The reader counted preempted requests still holding tokens: only those steps are parsed.
    suspects = (col["n_preempted_held"] > 0) | mismatch
    found: list[tuple[int, list[str], int]] = []  # (row, leaked ids, tokens they hold)
    # Only the request lists of those steps are read (new … finished, consecutive in a record).
    for i, rec in detail.region(trace, np.flatnonzero(suspects), "new", "unscheduled"):
        entries = (rec.get("new") or []) + (rec.get("resumed") or []) + (rec.get("running") or [])
        held = {e[0]: e[1] for e in entries}
        leaked = [rid for rid in rec.get("preempted") or () if rid in held]
        if leaked or mismatch[i]:
            found.append((i, leaked, sum(held.get(r, 0) for r in leaked)))
    rows = np.asarray([r for r, _, _ in found], dtype=np.int64)

    def numbers(leaked: list[str], tokens: int, used: int, charged: int) -> dict[str, Any]:
        return {"leaked": leaked, "target_used": used, "charged": charged}

    cells = ([x for _, x, _ in found], [t for _, _, t in found], col["target_used"][rows], charged[rows])
    return [_Batch(PREEMPTION_LEAK, col["step"][rows], cells, numbers)]


def _cap_binding(trace: Trace, a: BudgetAnalysis) -> list[_Batch]:
    cfg = trace.config
    cap, seqs = cfg.get("max_num_active_seqs"), cfg.get("max_num_seqs")
    if not cap or not seqs or cap >= seqs:
        return []  # no admission cap below the runner's own slots
    col = trace.columns
    n_sched = col["n_new"] + col["n_resumed"] + col["n_running"]
    # It binds only if one more request's query rows would have fit this step.
    query_room = (n_sched + 1) * a.model.q <= a.query_cap if a.model.q else True
    binding = (
        (col["num_running"] >= cap)
        & (col["num_waiting"] > 0)
        & (col["input_left"] > 0)
        & (col["target_left"] > 0)
        & (col["n_preempted"] == 0)
        & query_room
    )
    rows = np.flatnonzero(binding)

    def numbers(running: int, waiting: int, input_left: int) -> dict[str, Any]:
        return {"cap": cap, "num_running": running, "num_waiting": waiting, "input_left": input_left}

    cells = tuple(col[name][rows] for name in ("num_running", "num_waiting", "input_left"))
    return [_Batch(CAP_BINDING, col["step"][rows], cells, numbers, {"cap": cap})]


def free_percent(kv_usage: np.ndarray) -> np.ndarray:
    """The free KV share in whole percent, as `f"{1 - kv:.0%}"` prints it (the same double,
    rounded half to even), in one NumPy pass rather than a float format per flag. For
    kv_usage <= 1 (never "-0%")."""
    return np.rint((1 - np.asarray(kv_usage, dtype=np.float64)) * 100).astype(np.int64)


def _limit_holds(trace: Trace, bindings: np.ndarray) -> list[_Batch]:
    """A cap or limit that kept requests waiting while the budget and the KV cache sat idle.

    The 0.33 DFlash/DSpark cap has its own kind (admission-cap-binding), so it is left out here."""
    col = trace.columns
    rows = step_bindings.limit_steps(trace, bindings)
    cap = col["target_cap"][rows]
    idle = (col["target_left"][rows] >= IDLE_BUDGET_SHARE * cap) & (col["kv_usage"][rows] <= BUSY_KV_SHARE)
    held = rows[idle]
    held = held[bindings[held] != CODES.index("max_num_active_seqs")]
    cfg = trace.config
    # Per binding code: the setting's name, its value in this trace (None when not recorded),
    # its label and the knob that raises it.
    settings: dict[int, tuple[str, Any, str, str]] = {}
    for c in np.unique(bindings[held]).tolist():
        code = CODES[c]
        setting = REASONS[code]
        settings[c] = (code, cfg.get(code), setting.label, setting.knob)

    def numbers(c: int, w: int, left: int, target_cap: int, kv: float, _: int) -> dict[str, Any]:
        return {
            "reason": settings[c][0],
            "waiting": w,
            "target_left": left,
            "target_cap": target_cap,
            "kv_usage": kv,
        }

    cells = (
        bindings[held],
        step_bindings.waiting_weights(trace)[held],
        *(col[name][held] for name in ("target_left", "target_cap", "kv_usage")),
        free_percent(col["kv_usage"][held]),
    )
    return [_Batch(LIMIT_HOLDS, col["step"][held], cells, numbers, {"settings": settings})]
