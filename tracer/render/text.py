"""The sentences several outputs share, written once: the engine line, the run line, the flags
line and the totals of a comparison.

`schedscope summary`, `flags` and `diff`, the Perfetto export, the TUI and the web app all take
their words from here; a view may lay the parts out and style them, never reword them.
"Withheld" is the one word for the target tokens an excess draft-slot reservation kept out of a
step (tracer.analysis.budget's figure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from tracer.analysis.compare import Comparison
    from tracer.analysis.engines import RunTotals
    from tracer.analysis.flags import FlagReport
    from tracer.trace.trace_type import FooterCount, Trace


# -- the engine line ----------------------------------------------------------------------------
def spec_label(config: dict[str, Any]) -> str:
    """The spec-decode method and K ("dflash K=7"), or "no spec decode"."""
    method = config.get("spec_method")
    return f"{method} K={config.get('num_speculative_tokens')}" if method else "no spec decode"


def engine_parts(config: dict[str, Any]) -> list[str]:
    """The header's engine config in short parts, the spec label first; joined by engine_line."""
    q = config.get("query_rows_per_req") or 0
    cap, seqs = config.get("max_num_active_seqs"), config.get("max_num_seqs")
    parts = [
        spec_label(config),
        f"draft slots {config.get('draft_slots')}",
        f"query rows/req {q}" if q else "",
        f"draft budget {config['draft_budget']} rows" if config.get("draft_budget") else "",
        f"B {config.get('max_num_batched_tokens')}",
        f"target cap {config.get('max_num_scheduled_tokens')}",
        f"max seqs {seqs}" + (f" (active cap {cap})" if cap and cap != seqs else ""),
        str(config.get("scheduling_policy")),
        "async" if config.get("async_scheduling") else "sync",
    ]
    return [p for p in parts if p]


def engine_line(config: dict[str, Any]) -> str:
    return " · ".join(engine_parts(config))


# -- the run and flags lines ----------------------------------------------------------------------
def withheld_phrase(tokens: int) -> str:
    return f"{tokens} tokens withheld"


def flag_counts(report: FlagReport) -> str:
    """Flags by kind ("additive-double-reservation ×4, query-overflow ×2"), or "no flags"."""
    return ", ".join(f"{kind} ×{n}" for kind, n in report.counts().items()) or "no flags"


def flags_line(report: FlagReport) -> str:
    """The flags by kind and the target tokens they withheld."""
    withheld = report.tokens_withheld
    return flag_counts(report) + (f"; {withheld_phrase(withheld)}" if withheld else "")


def run_totals_line(totals: RunTotals) -> str:
    """The whole run of a data-parallel server, over its engines' traces."""
    return (
        f"{totals.engines} engines · {totals.steps} steps · {totals.target_tokens} target tokens · "
        f"{totals.preempted} preempted · {withheld_phrase(totals.withheld)} · {totals.flags} flags"
    )


def run_row(totals: RunTotals) -> str:
    """The run's totals after its engines' blocks, as `summary` and `flags` end them."""
    return f"run: {run_totals_line(totals)}"


def engine_heading(label: str, path: str) -> str:
    return f"== {label}: {path}"


def describe_gaps(trace: Trace, limit: int = 3) -> str:
    """Steps a live stream lost (its `gap` records), e.g. "steps 4–15, 40 missing"; "" if none."""
    if not trace.gaps:
        return ""
    spans = [f"{a + 1}–{b - 1}" if b - a > 2 else f"{a + 1}" for a, b in trace.gaps[:limit]]
    more = f" and {len(trace.gaps) - limit} more gaps" if len(trace.gaps) > limit else ""
    return f"steps {', '.join(spans)}{more} missing from the live stream"


def footer_mismatch(count: FooterCount | None) -> str | None:
    """A footer that counts other steps than were read: both numbers, and what accounts for
    the difference, e.g. "the footer counts 12 steps written, 9 were read (3 in the live
    stream's gaps)". None when they agree or there is no footer."""
    if count is None:
        return None
    why = []
    if count.in_gaps:
        why.append(f"{count.in_gaps} in the live stream's gaps")
    if count.dropped:
        why.append(f"{count.dropped} records dropped by the recorder")
    if count.out_of_order:
        why.append(f"{count.out_of_order} out-of-order step records skipped")
    elif count.malformed:
        why.append(f"{count.malformed} malformed lines skipped")
    because = f" ({'; '.join(why)})" if why else ""
    return f"the footer counts {count.written} steps written, {count.read} were read{because}"


class RunLine(NamedTuple):
    """What a run holds, in parts a view may style; `text` is the line as one string. Empty
    parts are absent."""

    steps: str  # "7 steps"
    flags: str  # flags by kind, or "no flags"
    flag_total: str  # "4 flags" or "no flags", where a line has no room for the kinds
    withheld: str  # "28 tokens withheld"
    torn: str  # where the file tore
    gaps: str  # steps the live stream lost

    @classmethod
    def of(cls, trace: Trace, report: FlagReport) -> RunLine:
        n = len(report.flags)
        return cls(
            steps=f"{len(trace)} steps",
            flags=flag_counts(report),
            flag_total=f"{n} flags" if n else "no flags",
            withheld=withheld_phrase(report.tokens_withheld) if report.tokens_withheld else "",
            torn=trace.torn.describe() if trace.torn is not None else "",
            gaps=describe_gaps(trace),
        )

    @property
    def text(self) -> str:
        """The parts as one line: "7 steps: <flags by kind>; <withheld>; <torn>; <gaps>"."""
        parts = (self.flags, self.withheld, self.torn, self.gaps)
        return f"{self.steps}: " + "; ".join(p for p in parts if p)


# -- the totals of a comparison ----------------------------------------------------------------
Better = Literal["fewer", "more"]

# Per aligned column of tracer.analysis.compare: its totals label and which way reads as better.
COLUMN_TOTALS: dict[str, tuple[str, Better | None]] = {
    "target_used": ("target_used (sum)", None),  # same workload: a change is neither
    "query_rows": ("query_rows (sum)", None),
    "admitted": ("admitted (sum)", None),
    "preempted": ("preempted (sum)", "fewer"),
}


@dataclass(frozen=True)
class Total:
    """One total of a comparison: A, B and the direction that reads as B doing better."""

    key: str  # stable name, for a view that shows only some totals
    label: str
    a: float
    b: float
    digits: int = 0  # decimals to show
    better: Better | None = None  # "fewer": a smaller B is better; "more": a larger; None: neither

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def direction(self) -> str:
        return f"{self.better} is better" if self.better else ""

    @property
    def verdict(self) -> Literal["better", "worse", ""]:
        """How B compares with A on this total, from its direction."""
        if not self.better or not self.delta:
            return ""
        return "better" if (self.delta < 0) == (self.better == "fewer") else "worse"

    def cells(self) -> tuple[str, str, str]:
        fmt = f"{{:.{self.digits}f}}"
        return fmt.format(self.a), fmt.format(self.b), fmt.format(self.delta)

    def signed_delta(self) -> str:
        """B − A with its sign, "0" when equal: the compare screen's delta column."""
        if not self.delta:
            return "0"
        return ("+" if self.delta > 0 else "") + self.cells()[2]


def compare_totals(c: Comparison) -> list[Total]:
    """The totals of a comparison, in the order `schedscope diff` prints them."""
    a, b = c.a, c.b
    rows = [
        Total("steps_to_drain", "steps to drain", a.steps_to_drain, b.steps_to_drain, better="fewer"),
        Total("tokens_per_step", "target tokens / step", a.tokens_per_step, b.tokens_per_step, 1, "more"),
    ]
    for name, (va, vb) in c.values.items():
        label, better = COLUMN_TOTALS.get(name, (f"{name} (sum)", None))
        rows.append(Total(name, label, int(va.sum()), int(vb.sum()), better=better))
    rows.append(Total("flags", "flags", len(a.flags.flags), len(b.flags.flags), better="fewer"))
    withheld = (a.flags.tokens_withheld, b.flags.tokens_withheld)
    rows.append(Total("tokens_withheld", "tokens withheld", *withheld, better="fewer"))
    return rows


TOTALS_HEAD = f"{'':24}{'A':>12}{'B':>12}{'B-A':>10}"


def totals_lines(c: Comparison) -> list[str]:
    """The totals block of `schedscope diff`: a heading, then one row per total."""
    lines = [TOTALS_HEAD]
    for t in compare_totals(c):
        va, vb, d = t.cells()
        lines.append(f"{t.label:24}{va:>12}{vb:>12}{d:>10}")
    return lines


# -- where a TTFT starts ------------------------------------------------------------------------
# tracer.analysis.throughput.BASES: the short label goes in table headers, the sentence under them.
TTFT_FROM_SHORT = {"arrival": "arrival", "engine": "engine", "seen": "listing"}
TTFT_FROM_SENTENCE = {
    "arrival": (
        "TTFT from each request's arrival (vLLM's arrival_time, stamped by the API server before "
        "tokenising): a client's TTFT less its time before that stamp and the first token's way back"
    ),
    "engine": (
        "TTFT from the schedule() call the engine added each request before: a lower bound, without "
        "the time before the engine had it"
    ),
    "seen": (
        "TTFT from the first step that listed each request (this trace records no arrivals): a lower "
        "bound, late for requests beyond the 32 a step lists waiting"
    ),
}
TTFT_PART_LABELS = {
    "frontend": "before the scheduler had it",
    "waiting": "waiting in the scheduler",
    "prefill": "prefill steps",
    "first_step": "the first token's step",
}


def ttft_parts_phrase(parts: dict[str, float] | None) -> str | None:
    """A request's mean TTFT split into its parts, in ms ("12.1 before the scheduler had it + ...")."""
    if not parts:
        return None
    return " + ".join(f"{parts[k]:,.1f} {label}" for k, label in TTFT_PART_LABELS.items() if k in parts)
