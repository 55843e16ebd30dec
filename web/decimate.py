"""Server-side decimation: which rows of a step range to send to the browser.

Min/max per bucket in NumPy, rather than plotly-resampler: plotly-resampler
0.11 requires plotly<7 and pandas, and keeps a server-side figure object per
graph with its own relayout callback, which would fight the live Patch updates
(extend in place, re-decimate on zoom) this app sends. Min/max per bucket keeps
every spike (a single flagged step's reserved band never vanishes), is exact for
step-shaped data at any zoom, and costs a few vectorised argmin/argmax passes:
~40 ms for all series of a 1M-step trace (bench/web_bench.py).

Series drawn together (a band and its outline, a used/cap pair) are decimated
as one group: they share the selected rows, so bands stay consistent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_POINTS = 4000  # points per trace sent to the browser
HOVER_CELLS = 100  # step_points keeps a point in each hundredth of the x range


def row_range(steps: np.ndarray, x0: float | None, x1: float | None) -> tuple[int, int]:
    """Rows [lo, hi) whose step lies in [x0, x1], plus one row either side so lines reach the edges."""
    n = len(steps)
    lo = 0 if x0 is None else max(0, int(np.searchsorted(steps, x0, "left")) - 1)
    hi = n if x1 is None else min(n, int(np.searchsorted(steps, x1, "right")) + 1)
    return lo, max(lo, hi)


def select_rows(group: Sequence[np.ndarray], lo: int, hi: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Row indices in [lo, hi) to draw for a group of aligned series.

    All rows if they fit; otherwise the first and last row, and per bucket the
    rows holding each series' minimum and maximum, so at most `max_points` rows.
    """
    n = hi - lo
    if n <= max_points:
        return np.arange(lo, hi)
    per_bucket = 2 * max(1, len(group))
    buckets = max(1, (max_points - 2) // per_bucket)
    width = -(-n // buckets)  # ceil: every row falls in a bucket
    buckets = -(-n // width)
    pad = buckets * width - n
    base = lo + np.arange(buckets) * width
    picks = [np.array([lo, hi - 1])]
    for values in group:
        seg = values[lo:hi]
        if pad:
            # Padding repeats the last value after it: argmin/argmax return the
            # first occurrence, so a padded row never wins over a real one.
            seg = np.concatenate([seg, np.full(pad, seg[-1], dtype=seg.dtype)])
        table = seg.reshape(buckets, width)
        picks.append(base + table.argmin(axis=1))
        picks.append(base + table.argmax(axis=1))
    rows = np.unique(np.concatenate(picks))
    return rows[rows < hi]


def step_points(x: np.ndarray, y: np.ndarray, cells: int = HOVER_CELLS) -> np.ndarray:
    """Indices of the points of a step line ("hv": each value holds until the next point) that
    draw it: the first and last point of each run of equal values, and the first of each of
    `cells` equal slices of the x range.

    The rest lie on a horizontal segment between two of those, so the line and its fill are
    drawn exactly as from every point. A cap line that never changes keeps about `cells`
    points, not its group's thousands. The slices keep a point within hover reach everywhere
    (a 1,200-pixel plot: one every 12 pixels, plotly's hover reaches 20), and a run's hover
    still reads its own value: its two ends bracket it.
    """
    n = len(y)
    if n <= 2:
        return np.arange(n)
    keep = np.ones(n, dtype=bool)
    same = y[1:] == y[:-1]
    keep[1:-1] = ~(same[:-1] & same[1:])  # not inside a run: differs from a neighbour
    span = float(x[-1] - x[0]) or 1.0
    cell = ((x - x[0]) * (cells / span)).astype(np.int64)
    keep[1:] |= cell[1:] != cell[:-1]
    return np.flatnonzero(keep)


def thin(rows: np.ndarray, max_points: int = MAX_POINTS) -> np.ndarray:
    """Evenly spaced subset of marker rows (markers have no min/max to keep)."""
    if len(rows) <= max_points:
        return rows
    keep = np.linspace(0, len(rows) - 1, max_points).round().astype(np.int64)
    return rows[np.unique(keep)]


_RANGE_KEY = re.compile(r"^xaxis\d*\.range\[([01])\]$")
_AUTO_KEY = re.compile(r"^xaxis\d*\.autorange$")
Range = list[float] | None


def parse_xrange(relayout: dict[str, Any] | None) -> tuple[bool, Range]:
    """(changed, range) from a plotly relayout event: a new x range, a reset (None), or no x change."""
    if not relayout:
        return False, None
    lo = hi = None
    for key, value in relayout.items():
        m = _RANGE_KEY.match(key)
        if m:
            lo, hi = (value, hi) if m.group(1) == "0" else (lo, value)
        elif re.match(r"^xaxis\d*\.range$", key) and isinstance(value, list) and len(value) == 2:
            lo, hi = value
        elif _AUTO_KEY.match(key) and value:
            return True, None
    if lo is None or hi is None:
        return False, None
    return True, [float(lo), float(hi)]
