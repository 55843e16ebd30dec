"""The flag table: filtered and paged on the server (a long trace can hold many flags)."""

from __future__ import annotations

from typing import Any

from tracer.flags import Flag

PAGE_SIZE = 12
COLUMNS = [
    {"name": "step", "id": "step"},
    {"name": "severity", "id": "severity"},
    {"name": "kind", "id": "kind"},
    {"name": "tokens lost", "id": "tokens_lost"},
    {"name": "what to do", "id": "message"},
]


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


def page(
    flags: list[Flag], page_current: int | None, page_size: int = PAGE_SIZE
) -> tuple[list[dict[str, Any]], int]:
    """Rows of one page and the page count."""
    count = max(1, -(-len(flags) // page_size))
    current = min(max(0, page_current or 0), count - 1)
    rows = [
        {
            "step": f.step,
            "severity": f.severity,
            "kind": f.kind,
            "tokens_lost": f.numbers.get("tokens_lost", ""),
            "message": f.message,
        }
        for f in flags[current * page_size : (current + 1) * page_size]
    ]
    return rows, count
