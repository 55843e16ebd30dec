"""The sweep figure (one line per policy, objective against budget) and the web app's Sweep page,
from a `schedscope sweep --json` document (no vLLM needed: the document is written here)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ROOT
from tracer.trace.reader import load
from web.app import make_app
from web.sweep_figure import sweep_figure


def _doc(error: float | None = 2.5) -> dict[str, Any]:
    results = []
    for rank, (policy, budget, drain) in enumerate(
        [("separate", 8192, 2.4), ("additive", 8192, 2.9), ("separate", 4096, 4.4), ("additive", 4096, 4.9)],
        1,
    ):
        setting = {
            "policy": policy,
            "max_num_batched_tokens": budget,
            "num_speculative_tokens": None,
            "max_num_seqs": None,
            "method": None,
        }
        results.append(
            {
                "setting": setting,
                "label": f"{policy} B={budget}",
                "rank": rank,
                "steps": 5 + rank,
                "target_tokens_per_step": 6000.0 / rank,
                "tokens_withheld": 28 * (policy == "additive"),
                "output_tok_s": 1000.0 / drain,
                "ttft_p99_ms": drain - 0.5,
                "drain_ms": drain,
                "within_error_of_best": rank == 1,
            }
        )
    return {
        "trace": "t.jsonl",
        "objective": "drain",
        "arrivals": "step",
        "clock": {},
        "clock_sentence": "a clock",
        "error_pct": error,
        "results": results,
    }


def test_one_line_per_policy_objective_against_budget() -> None:
    fig = sweep_figure(_doc())
    lines = {t.name: t for t in fig.data}
    assert set(lines) == {"separate", "additive"}
    assert list(lines["separate"].x) == [4096, 8192] and list(lines["separate"].y) == [4.4, 2.4]
    assert list(lines["additive"].error_y.array) == pytest.approx([4.9 * 0.025, 2.9 * 0.025])
    assert "±2.5%" in fig.layout.title.text and "lower is better" in fig.layout.title.text
    unknown = sweep_figure(_doc(None))
    assert unknown.data[0].error_y.array is None and "error unknown" in unknown.layout.title.text


def _find(component: Any, wanted: str) -> Any:
    if getattr(component, "id", None) == wanted:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str):
            hit = _find(child, wanted)
            if hit is not None:
                return hit
    return None


def test_the_web_app_shows_a_saved_sweep_on_its_own_page() -> None:
    trace = load(ROOT / "sample_traces" / "dflash_k7_additive.jsonl")
    app = make_app(trace, sweep=_doc())
    try:
        tab = _find(app.layout, "sweep-tab")
        assert tab is not None and tab.label == "Sweep"
        assert len(_find(tab, "sweep-graph").figure.data) == 2
        table = _find(tab, "sweep-table").children
        assert "ranked by time to drain (lower is better)" in table and "separate B=8192" in table
    finally:
        for feed in app.feeds:
            feed.stop()
    plain = make_app(trace)
    assert _find(plain.layout, "sweep-tab") is None
