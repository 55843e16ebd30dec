"""Compare two traces side by side: tracer.analysis.compare's alignment, deltas and headline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.widgets import Footer, ProgressBar, Static

from tracer.opening.door import Spec, open_input
from tracer.render import keys, labels, moves
from tracer.render.compare import headline_sentences, performance_note, performance_rows
from tracer.render.step import arithmetic
from tracer.render.text import compare_totals
from tracer.trace.errors import TraceError
from tui.bins import Window
from tui.data import CompareModel, TraceModel
from tui.markup import bold
from tui.screens.base import Command, StepScreen
from tui.widgets.inspector import engine_line
from tui.widgets.tables import DeltaTable
from tui.widgets.textview import TextView
from tui.widgets.timeline import Timeline
from tui.widgets.vlist import VirtualList

VERDICT_STYLE = {"better": "$success", "worse": "$error", "": "$text-muted"}
# The panel shares the top of the screen with the headline: the totals a policy moves, not the
# per-column sums that stay equal for one workload (`schedscope diff` prints them all).
SHOWN_TOTALS = ("steps_to_drain", "tokens_per_step", "tokens_withheld", "flags", "preempted", "admitted")


def totals_lines(model: CompareModel) -> list[str]:
    """tracer.render.text's totals laid out as A, B and B−A; the delta is green where B is better,
    red where worse."""
    c = model.comparison
    out = [f"[$text-muted]{'':20}{'A':>9}{'B':>9}{'B−A':>9}[/]"]
    totals = {t.key: t for t in compare_totals(c)}
    for total in (totals[key] for key in SHOWN_TOTALS):
        va, vb, _ = total.cells()
        delta = total.signed_delta()
        out.append(f"{escape(total.label):<20}{va:>9}{vb:>9}[{VERDICT_STYLE[total.verdict]}]{delta:>9}[/]")
    if c.perf is not None:  # throughput and latency: measured, or a replay's prediction
        for label, pa, pb in performance_rows(*c.perf):
            out.append(f"{escape(label):<20}{escape(pa):>10}{escape(pb):>11}")
        out.append(f"[$text-muted]{escape(performance_note(*c.perf))}[/]")
    return out


class CompareScreen(StepScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "next_change", keys.NEXT_DIFFERENCE),
        Binding("N", "prev_change", keys.PREVIOUS_DIFFERENCE, show=False),
    ]
    DEFAULT_CSS = """
    CompareScreen #top { height: auto; background: $panel; padding: 0 1; }
    CompareScreen #cmp-title { width: 1fr; }
    CompareScreen #status { width: auto; color: $text-muted; }
    CompareScreen #titlebar { height: 1; }
    CompareScreen #progress { height: 1; }
    CompareScreen #progress.done { display: none; }
    CompareScreen #summary { height: auto; }
    CompareScreen #headline { width: 1fr; height: auto; border: round $accent; padding: 0 1; }
    CompareScreen #totals { width: 52; height: auto; border: round $primary 40%; padding: 0 1; }
    CompareScreen #sides { height: auto; }
    CompareScreen .side { width: 1fr; height: auto; }
    CompareScreen .side-title { padding: 0 1; height: auto; }
    CompareScreen .arith { height: 7; color: $text; }
    CompareScreen Timeline { border: round $primary 40%; }
    CompareScreen DeltaTable { height: 1fr; min-height: 5; }
    """

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.spec = spec  # A and B (tracer.opening.door)
        self.strict = spec.strict
        self.model: CompareModel | None = None
        self.loaded = False

    def compose(self) -> ComposeResult:
        a, b = (Path(p) for p in self.spec.traces)
        with Vertical(id="top"):
            with Horizontal(id="titlebar"):
                yield Static(
                    labels.compare_title(escape(a.name), escape(b.name), mark=bold),
                    id="cmp-title",
                )
                yield Static(labels.LOADING, id="status")
            yield ProgressBar(id="progress", show_eta=False)
        with Horizontal(id="summary"):
            headline = Static(labels.COMPARING, id="headline")
            headline.border_title = labels.HEADLINE
            yield headline
            totals = Static("", id="totals")
            totals.border_title = labels.TOTALS
            yield totals
        with Horizontal(id="sides"):
            for side in ("a", "b"):
                with Vertical(classes="side"):
                    yield Static("", id=f"title-{side}", classes="side-title")
                    timeline = Timeline(compact=True, id=f"timeline-{side}")
                    timeline.border_title = side.upper()
                    yield timeline
                    yield TextView("", id=f"arith-{side}", classes="arith")
        yield DeltaTable(id="deltas")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DeltaTable).focus()
        self.call_after_refresh(self.app.mark, "first_frame")  # type: ignore[attr-defined]
        self.load()

    @property
    def total(self) -> int:
        return len(self.model) if self.model is not None else 0

    @work(thread=True, exclusive=True, group="compare")
    def load(self) -> None:
        """Both loads and the comparison run off the UI thread."""
        bar = self.query_one(ProgressBar)

        def progress(done: int, total: int) -> None:  # A's parse; B's runs beside it (load_pair)
            self.app.call_from_thread(bar.update, total=max(1, total), progress=done)

        try:
            opened = open_input(replace(self.spec, progress=progress, session=TraceModel.build))
            model = CompareModel.build(*opened.pair)
        except TraceError as exc:
            self.app.call_from_thread(self.app.show_error, exc, strict=self.strict)  # type: ignore[attr-defined]
            return
        self.app.call_from_thread(self._ready, model)

    def _ready(self, model: CompareModel) -> None:
        self.model = model
        self.loaded = True
        self.query_one(ProgressBar).add_class("done")
        headline = headline_sentences(model.comparison)
        self.query_one("#headline", Static).update("\n".join(escape(s) for s in headline))
        self.query_one("#totals", Static).update("\n".join(totals_lines(model)))
        for side, trace_model in (("a", model.a), ("b", model.b)):
            h = trace_model.trace.header
            policy = escape(str(h.get("policy")))
            self.query_one(f"#title-{side}", Static).update(
                labels.side_title(
                    side.upper(),
                    escape(trace_model.name),
                    policy,
                    escape(str(h.get("vllm_version"))),
                    mark=bold,
                )
                + f"\n[$text-muted]{engine_line(trace_model)}[/]"
            )
            self.query_one(f"#timeline-{side}", Timeline).show(trace_model, total=len(model))
        self.query_one(DeltaTable).show(model)
        self.window = Window.fit(len(model))
        self.apply_view()
        self.update_status()
        self.call_after_refresh(self.app.mark, "loaded")  # type: ignore[attr-defined]

    def apply_view(self) -> None:
        model = self.model
        if model is None:
            return
        for side, trace_model in (("a", model.a), ("b", model.b)):
            self.query_one(f"#timeline-{side}", Timeline).set_view(self.window, self.cursor)
            self.query_one(f"#arith-{side}", TextView).update(self._arith(trace_model, side.upper()))
        self.query_one(DeltaTable).set_cursor(self.cursor)

    def _arith(self, side: TraceModel, label: str) -> str:
        row = self.cursor
        if row >= len(side):
            return f"[$text-muted]{escape(moves.drained(label, row, len(side)))}[/]"
        lines = [f"[b]{labels.side_step(label, int(side.trace.columns['step'][row]))}[/b]"]
        for line in arithmetic(side.trace, row, side.report.analysis):
            style = "$error" if line.startswith("withheld") else "$text"
            lines.append(f"[{style}]{escape(line)}[/]")
        for flag in side.flags_at(row):
            lines.append(f"[$warning]{flag.kind}[/]")
        return "\n".join(lines)

    def update_status(self) -> None:
        if self.model is None:
            return
        changed = moves.steps_differ(len(self.model.changed))
        self.query_one("#status", Static).update(f"{self.replay_status()} · {changed} · n/N")

    @on(VirtualList.Chosen, "#deltas")
    def _delta_chosen(self, message: VirtualList.Chosen) -> None:
        self.set_cursor(message.row)

    @on(Timeline.Clicked)
    def _timeline_clicked(self, message: Timeline.Clicked) -> None:
        self.set_cursor(message.row)

    def _jump(self, backwards: bool) -> None:
        if self.model is None:
            return
        row = self.model.next_change(self.cursor, backwards=backwards)
        if row is None:
            self.notify(moves.nothing_further(moves.STEP_THAT_DIFFERS, backwards), timeout=2)
        else:
            self.set_cursor(row)

    def action_next_change(self) -> None:
        self._jump(backwards=False)

    def action_prev_change(self) -> None:
        self._jump(backwards=True)

    def goto_step(self, text: str) -> None:
        if not text.isdigit() or self.model is None:
            super().goto_step(text)
            return
        self.set_cursor(int(text) - 1)  # aligned by step index: step k is row k-1

    def commands(self) -> list[Command]:
        return [
            (*keys.NEXT_DIFFERENCE_CMD, "next_change"),
            (*keys.PREVIOUS_DIFFERENCE_CMD, "prev_change"),
            *super().commands(),
        ]
