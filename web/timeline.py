"""The timeline page's chart: which series go in which panel, how they look, and the flag markers."""

from __future__ import annotations

import html
import textwrap
from typing import Any

import numpy as np

from tracer.analysis import flags as flag_registry  # read when drawn: a new kind needs no edit here
from tracer.analysis.flags import Flag, kind_info
from tracer.render import empty, labels
from tracer.render.flags import message
from web.chart import Chart, Line, Markers, Panel
from web.model import TraceView

BLUE, ORANGE, GREY, RED, DARK = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728", "#444444"
GREEN, PURPLE, TEAL = "#2ca02c", "#9467bd", "#17becf"


def flag_hover(flag: Flag) -> str:
    """Hover text of a flag marker: the sentence and the numbers behind it."""
    sentence = "<br>".join(textwrap.wrap(html.escape(message(flag), quote=False), 90))
    numbers = " · ".join(f"{k}={html.escape(str(v), quote=False)}" for k, v in flag.numbers.items())
    title = labels.flag_hover_title(flag.step, flag.kind)
    return f"<b>{title}</b> ({flag.severity})<br>{sentence}<br><i>{numbers}</i>"


def flag_markers(view: TraceView, panel: int) -> tuple[Markers, ...]:
    """One marker trace per flag kind (always all kinds: trace indices stay fixed as a live trace grows)."""
    steps = view.steps
    report = view.report.flags
    out = []
    for kind in flag_registry.KINDS:
        positions = report.positions([kind])
        rows = np.searchsorted(steps, report.steps[positions])
        hover: dict[int, str] = {}  # built on first show, reused by every later zoom

        def text(i: int, positions: np.ndarray = positions, hover: dict[int, str] = hover) -> str:
            if i not in hover:
                hover[i] = flag_hover(report[int(positions[i])])
            return hover[i]

        out.append(
            Markers(
                name=f"{kind_info(kind).short} ({len(positions)})",
                panel=panel,
                rows=rows,
                y=[kind] * len(positions),
                color=kind_info(kind).color,
                text=text,
            )
        )
    return tuple(out)


def timeline_chart(view: TraceView) -> Chart:
    cached = view.cache.get("timeline")
    if cached is not None:
        return cached
    s = view.series
    has_runner = bool((s["buffer_target_rows"] >= 0).any() or (s["buffer_draft_rows"] >= 0).any())
    has_query = bool(view.report.analysis.model.q) and view.report.analysis.model.separate_pass
    kinds = flag_registry.KINDS
    kinds_axis: dict[str, Any] = {
        "type": "category",
        "categoryorder": "array",
        "categoryarray": list(kinds),
        "tickvals": list(kinds),
        "ticktext": [kind_info(k).short for k in kinds],
        "tickfont": {"size": 10},
        "range": [-0.6, len(kinds) - 0.4],
        "fixedrange": True,
    }
    panels = (
        Panel(
            labels.FLAGS_PANEL,
            yaxis=kinds_axis,
            weight=1.3,
            note=None if view.report.flags else empty.no_flags_of(None),
        ),
        Panel(
            labels.TARGET_PANEL,
            (
                Line(labels.TARGET_USED, s["target_used"], BLUE, fill=True),
                Line(labels.TARGET_BUDGET, s["target_cap"], DARK, dash="dash", width=1),
            ),
        ),
        Panel(
            labels.INPUT_PANEL,
            (
                Line(labels.INPUT_USED, s["input_used"], ORANGE, fill=True),
                Line(labels.INPUT_TARGET, s["input_target"], BLUE, fill=True),
                Line(labels.INPUT_BUDGET, s["input_cap"], DARK, dash="dash", width=1),
            ),
        ),
        Panel(
            labels.RESERVATION_PANEL,
            (
                Line(labels.RESERVED, s["input_reserved"], RED, fill=True),
                Line(labels.NEEDED, s["reserved_needed"], GREY, fill=True),
                Line(labels.TOKENS_WITHHELD_LINE, s["withheld"], DARK, markers_only=True, gaps_below=1),
            ),
        ),
        Panel(
            labels.QUERY_PANEL,
            (
                Line(labels.QUERY_ROWS, s["query_rows"], PURPLE, fill=True),
                Line(labels.QUERY_CAPACITY, s["query_cap"], DARK, dash="dash", width=1),
            ),
            note=None if has_query else empty.NO_DRAFTER_PASS,
        ),
        Panel(
            labels.BUFFER_PANEL,
            (
                Line(labels.TARGET_PASS_ROWS, s["buffer_target_rows"], BLUE, gaps_below=0),
                Line(labels.TARGET_BUFFER, s["buffer_target_cap"], BLUE, dash="dash", gaps_below=0, width=1),
                Line(labels.DRAFT_PASS_ROWS, s["buffer_draft_rows"], GREEN, gaps_below=0),
                Line(labels.DRAFT_BUFFER, s["buffer_draft_cap"], GREEN, dash="dash", gaps_below=0, width=1),
            ),
            note=None if has_runner else empty.NO_RUNNER_RECORDS,
        ),
        Panel(
            labels.REQUESTS_PANEL,
            (
                Line(labels.RUNNING_LINE, s["num_running"], BLUE),
                Line(labels.WAITING_LINE, s["num_waiting"], ORANGE),
                Line(labels.PREEMPTED_LINE, s["n_preempted"], RED),
            ),
        ),
        Panel(labels.KV_PANEL, (Line(labels.KV_LINE, s["kv_usage_pct"], TEAL, fill=True),)),
    )
    chart = Chart(x=view.steps, panels=panels, markers=flag_markers(view, panel=0), height=1250)
    view.cache["timeline"] = chart
    return chart
