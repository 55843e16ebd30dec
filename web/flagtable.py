"""The flag table: filtered and paged on the server (a long trace can hold many flags).

A plain HTML table rather than dash_table.DataTable, which Dash 4 deprecates;
each row's step is a button that jumps to the step.
"""

from __future__ import annotations

from typing import Any

from dash import html

from tracer.analysis.flags import Flag

PAGE_SIZE = 12
JUMP = "flag-jump"  # pattern-matching id type of the step buttons


def filter_flags(flags: list[Flag], kinds: list[str] | None, text: str | None) -> list[Flag]:
    """Flags of the chosen kinds (all if none chosen) whose message, kind or step contains `text`."""
    wanted = set(kinds or ())
    needle = (text or "").strip().lower()
    out = []
    for f in flags:
        if wanted and f.kind not in wanted:
            continue
        if needle and needle not in f.message.lower() and needle not in f.kind and needle != str(f.step):
            continue
        out.append(f)
    return out


def page(flags: list[Flag], current: int | None, page_size: int = PAGE_SIZE) -> tuple[list[Flag], int, int]:
    """(flags of the page, the page clamped into range, page count)."""
    count = max(1, -(-len(flags) // page_size))
    current = min(max(0, current or 0), count - 1)
    return flags[current * page_size : (current + 1) * page_size], current, count


def table(flags: list[Flag], total: int) -> Any:
    if not flags:
        return html.P("no flags" if not total else "no flag matches the filter", className="muted")
    head = html.Tr([html.Th(h) for h in ("step", "severity", "kind", "tokens withheld", "what to do")])
    rows = [
        html.Tr(
            [
                html.Td(
                    html.Button(str(f.step), id={"type": JUMP, "step": f.step}, title="jump to this step")
                ),
                html.Td(f.severity, className=f"sev-{f.severity}"),
                html.Td(f.kind),
                html.Td(f.numbers.get("tokens_withheld", "")),
                html.Td(f.message, className="message"),
            ]
        )
        for f in flags
    ]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="flags")
