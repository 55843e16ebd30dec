"""Per-step series that the views plot, named once.

Every value comes from the reader's columns or from tracer.analysis.budget's analysis, so
a view picks series by name and draws them: it does no budget arithmetic. Arrays
are aligned with `trace.columns` (row i is step `step[i]`). Runner values are -1
where a step has no runner record for that pass.
"""

from __future__ import annotations

import numpy as np

from tracer.analysis.budget import BudgetAnalysis
from tracer.trace.trace_type import Trace


def step_series(trace: Trace, analysis: BudgetAnalysis) -> dict[str, np.ndarray]:
    col, run = trace.columns, trace.runner
    return {
        "step": col["step"],
        # Target token budget.
        "target_used": col["target_used"],
        "target_cap": col["target_cap"],
        # Input budget: rows used by target tokens, and the draft slots reserved on top.
        "input_target": col["input_used"] - col["input_reserved"],
        "input_used": col["input_used"],
        "input_reserved": col["input_reserved"],
        "input_cap": col["input_cap"],
        # The reservation split by the budget model: what the method needs, what is excess,
        # and the target tokens the excess withheld.
        "reserved_needed": analysis.needed,
        "reserved_excess": analysis.excess,
        "withheld": analysis.withheld,
        # The separate drafter pass.
        "query_rows": analysis.query_rows,
        "query_cap": analysis.query_cap,
        # Buffer occupancy per forward pass, from runner records.
        "buffer_target_rows": run["target_rows"],
        "buffer_target_cap": run["target_cap"],
        "buffer_draft_rows": run["draft_rows"],
        "buffer_draft_cap": run["draft_cap"],
        # Requests.
        "num_running": col["num_running"],
        "num_waiting": col["num_waiting"],
        "n_preempted": col["n_preempted"],
        "n_admitted": col["n_new"] + col["n_resumed"],
        "kv_usage_pct": col["kv_usage"] * 100.0,
    }
