"""Flag detectors: accounting faults found in a trace, each with the numbers behind
it and one sentence a user can act on. All budget reasoning comes from
tracer.analysis.budget; this module only decides what is worth a flag.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tracer.analysis import detail, why
from tracer.analysis.budget import BudgetAnalysis, analyze
from tracer.analysis.reasons import CODES, REASONS
from tracer.trace.reader import Trace

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


@dataclass(frozen=True)
class Flag:
    step: int
    kind: str
    severity: str
    message: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FlagReport:
    flags: list[Flag]
    analysis: BudgetAnalysis

    @property
    def tokens_withheld(self) -> int:
        """Target tokens the additive reservation withheld, over all its flags."""
        return sum(f.numbers.get("tokens_withheld", 0) for f in self.flags if f.kind == ADDITIVE)

    def counts(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.flags))


def detect(
    trace: Trace, analysis: BudgetAnalysis | None = None, *, bindings: np.ndarray | None = None
) -> FlagReport:
    """Every flag of the trace; `bindings` (tracer.analysis.why.bindings) when already computed."""
    analysis = analysis or analyze(trace)
    flags: list[Flag] = []
    finders = (_additive, _query_overflow, _shared_overflow, _negative, _preemption_leak, _cap_binding)
    for finder in finders:
        flags.extend(finder(trace, analysis))
    flags.extend(_limit_holds(trace, why.bindings(trace) if bindings is None else bindings))
    flags.sort(key=lambda f: (f.step, KINDS.index(f.kind)))
    return FlagReport(flags, analysis)


def _steps(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)]


def _additive(trace: Trace, a: BudgetAnalysis) -> list[Flag]:
    m = a.model
    if not m.separate_pass:
        return []
    col = trace.columns
    rows = np.flatnonzero(a.withheld > 0)
    # Plain ints, column by column: hundreds of thousands of flags in a big trace.
    cells = zip(
        *(
            arr[rows].tolist()
            for arr in (
                col["step"], a.withheld, a.excess, col["target_used"], a.exact, a.reserved, a.needed,
                col["target_cap"], col["input_used"], col["input_cap"],
            )
        ),
        strict=True,
    )  # fmt: skip
    head = f"{m.method} K={m.k} was charged "
    tail = (
        f" draft slots against the target input budget, but its {m.q} query rows per request run in a "
        "separate pass with their own buffer: this withheld "
    )
    advice = "Keep a separate query budget (policy 'separate') instead of the additive reservation."
    out = []
    for step, withheld, excess, used, exact, reserved, needed, target_cap, input_used, input_cap in cells:
        bound = "" if exact else "at most "
        out.append(
            Flag(
                step=step,
                kind=ADDITIVE,
                severity=SEVERITY[ADDITIVE],
                message=(
                    f"{head}{excess}{tail}{bound}{withheld} target tokens ({used} scheduled instead of "
                    f"{used + withheld}). {advice}"
                ),
                numbers={
                    "tokens_withheld": withheld,
                    "exact": exact,
                    "reserved": reserved,
                    "needed": needed,
                    "target_used": used,
                    "target_cap": target_cap,
                    "input_used": input_used,
                    "input_cap": input_cap,
                },
            )
        )
    return out


def _query_overflow(trace: Trace, a: BudgetAnalysis) -> list[Flag]:
    if not a.model.separate_pass or not a.model.q:
        return []
    col = trace.columns
    over = (a.query_cap > 0) & (a.query_rows > a.query_cap)
    return [
        Flag(
            int(col["step"][i]),
            QUERY_OVERFLOW,
            SEVERITY[QUERY_OVERFLOW],
            f"{int(a.query_rows[i])} query rows exceed the drafter buffer of {int(a.query_cap[i])}: bound "
            f"admission so that requests × {a.model.q} ≤ {int(a.query_cap[i])}.",
            {"query_rows": int(a.query_rows[i]), "query_cap": int(a.query_cap[i]), "per_req": a.model.q},
        )
        for i in _steps(over)
    ]


def _shared_overflow(trace: Trace, a: BudgetAnalysis) -> list[Flag]:
    m = a.model
    if m.separate_pass or not m.draft_slots or not m.buffer_capacity:
        return []
    col = trace.columns
    rows = col["target_used"] + a.needed
    over = rows > m.buffer_capacity
    drafted = trace.runner["draft_rows"] > trace.runner["draft_cap"]
    over |= drafted & (trace.runner["draft_cap"] >= 0)
    return [
        Flag(
            int(col["step"][i]),
            SHARED_OVERFLOW,
            SEVERITY[SHARED_OVERFLOW],
            f"target tokens plus {m.method} draft rows ({int(rows[i])}) exceed the shared input buffer of "
            f"{m.buffer_capacity}: the reservation must stay additive for this method.",
            {"rows": int(rows[i]), "buffer_capacity": m.buffer_capacity},
        )
        for i in _steps(over)
    ]


def _negative(trace: Trace, a: BudgetAnalysis) -> list[Flag]:
    col = trace.columns
    out = []
    for name in ("target", "input"):
        for i in _steps(col[f"{name}_left"] < 0):
            left, cap = int(col[f"{name}_left"][i]), int(col[f"{name}_cap"][i])
            out.append(
                Flag(
                    int(col["step"][i]),
                    NEGATIVE,
                    SEVERITY[NEGATIVE],
                    f"the {name} budget ended the step at {left}: the scheduler handed out more than "
                    f"its {cap}; its final assert would fail.",
                    {"budget": name, "left": left, "cap": cap},
                )
            )
    return out


def _preemption_leak(trace: Trace, a: BudgetAnalysis) -> list[Flag]:
    """A request preempted in a step must hold none of that step's budget."""
    col = trace.columns
    out = []
    charged = col["new_tokens"] + col["resumed_tokens"] + col["running_tokens"]
    mismatch = (col["input_used"] != col["target_used"] + col["input_reserved"]) | (
        charged != col["target_used"]
    )
    # The reader counted preempted requests still holding tokens: only those steps are parsed.
    suspects = (col["n_preempted_held"] > 0) | mismatch
    # Only the request lists of those steps are read (new … finished, consecutive in a record).
    for i, rec in detail.region(trace, np.flatnonzero(suspects), "new", "unscheduled"):
        entries = (rec.get("new") or []) + (rec.get("resumed") or []) + (rec.get("running") or [])
        held = {e[0]: e[1] for e in entries}
        leaked = [rid for rid in rec.get("preempted") or () if rid in held]
        if not leaked and not mismatch[i]:
            continue
        out.append(
            Flag(
                int(col["step"][i]),
                PREEMPTION_LEAK,
                SEVERITY[PREEMPTION_LEAK],
                f"preempted request(s) {', '.join(leaked) or '?'} still hold this step's budget "
                f"({sum(held.get(r, 0) for r in leaked)} tokens): restore both the target and the "
                "input/query budget when preempting a request scheduled earlier in the step.",
                {"leaked": leaked, "target_used": int(col["target_used"][i]), "charged": int(charged[i])},
            )
        )
    return out


def _cap_binding(trace: Trace, a: BudgetAnalysis) -> list[Flag]:
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
    return [
        Flag(
            int(col["step"][i]),
            CAP_BINDING,
            SEVERITY[CAP_BINDING],
            f"the admission cap of {cap} running requests kept {int(col['num_waiting'][i])} waiting while "
            f"{int(col['input_left'][i])} input rows were free; a per-step query budget would admit "
            "more as long as their query rows fit.",
            {
                "cap": cap,
                "num_running": int(col["num_running"][i]),
                "num_waiting": int(col["num_waiting"][i]),
                "input_left": int(col["input_left"][i]),
            },
        )
        for i in _steps(binding)
    ]


def _limit_holds(trace: Trace, bindings: np.ndarray) -> list[Flag]:
    """A cap or limit that kept requests waiting while the budget and the KV cache sat idle.

    The 0.33 DFlash/DSpark cap has its own kind (admission-cap-binding), so it is left out here."""
    col = trace.columns
    rows = why.limit_steps(trace, bindings)
    cap = col["target_cap"][rows]
    idle = (col["target_left"][rows] >= IDLE_BUDGET_SHARE * cap) & (col["kv_usage"][rows] <= BUSY_KV_SHARE)
    cfg = trace.config
    weights = why.waiting_weights(trace)  # once: a whole-trace array, not one per flagged step
    out = []
    for row in rows[idle].tolist():
        code = CODES[int(bindings[row])]
        if code == "max_num_active_seqs":
            continue
        setting = REASONS[code]
        value = cfg.get(code)
        name = f"{code}={value}" if value is not None else setting.label
        waiting = int(weights[row])
        left, target_cap, kv = (
            int(col["target_left"][row]),
            int(col["target_cap"][row]),
            float(col["kv_usage"][row]),
        )
        out.append(
            Flag(
                int(col["step"][row]),
                LIMIT_HOLDS,
                SEVERITY[LIMIT_HOLDS],
                f"{name} kept {waiting} request{'s' if waiting != 1 else ''} waiting while {left} of "
                f"{target_cap} budget tokens and {1 - kv:.0%} of KV were free: raise {setting.knob}.",
                {
                    "reason": code,
                    "waiting": waiting,
                    "target_left": left,
                    "target_cap": target_cap,
                    "kv_usage": kv,
                },
            )
        )
    return out
