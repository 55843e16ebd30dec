"""The flag table: filtered and paged on the server (a long trace can hold many flags).

A plain HTML table rather than dash_table.DataTable, which Dash 4 deprecates;
each row's step is a button that jumps to the step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dash import html

from tracer.analysis.flags import Flag, FlagList
from tracer.render import empty, labels
from tracer.render.flags import message
from tracer.render.flags import messages as flag_messages

PAGE_SIZE = 12
JUMP = "flag-jump"  # pattern-matching id type of the step buttons


def filter_flags(flags: FlagList, kinds: list[str] | None, text: str | None) -> np.ndarray:
    """Positions in `flags` of those of the chosen kinds (all if none chosen) whose message,
    kind or step contains `text`; no Flag object is made (a trace can flag every step)."""
    positions = flags.positions(kinds or None)
    needle = (text or "").strip().lower()
    if not needle or not len(positions):
        return positions
    messages, kinds_of, steps = flag_messages(flags), flags.kinds, flags.steps
    keep = [
        i
        for i in positions.tolist()
        if needle in messages[i].lower() or needle in kinds_of[i] or needle == str(steps[i])
    ]
    return np.asarray(keep, dtype=np.int64)


def page(
    positions: np.ndarray, current: int | None, page_size: int = PAGE_SIZE
) -> tuple[np.ndarray, int, int]:
    """(positions of the page's flags, the page clamped into range, page count)."""
    count = max(1, -(-len(positions) // page_size))
    current = min(max(0, current or 0), count - 1)
    return positions[current * page_size : (current + 1) * page_size], current, count


def table(flags: list[Flag], total: int) -> Any:
    if not flags:
        return html.P(empty.no_flags(total), className="muted")
    head = html.Tr([html.Th(h) for h in labels.FLAG_TABLE_COLUMNS])
    rows = [
        html.Tr(
            [
                html.Td(html.Button(str(f.step), id={"type": JUMP, "step": f.step}, title=labels.JUMP_TIP)),
                html.Td(f.severity, className=f"sev-{f.severity}"),
                html.Td(f.kind),
                html.Td(f.numbers.get("tokens_withheld", "")),
                html.Td(message(f), className="message"),
            ]
        )
        for f in flags
    ]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="flags")
