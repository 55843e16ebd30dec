"""Map a window of steps onto terminal columns, and reduce per-step arrays per column.

Zoomed out, one column covers many steps and shows their maximum, so a single
spike or flag is never averaged away; zoomed in, one step spans several columns.
Pure NumPy: every reduction is O(steps in the window), never a Python loop per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SPAN = 8  # zooming in stops at this many steps across the chart


@dataclass(frozen=True)
class Window:
    start: int  # first row shown
    span: int  # rows shown (>= 1)

    @property
    def end(self) -> int:
        return self.start + self.span

    @classmethod
    def fit(cls, total: int) -> Window:
        return cls(0, max(1, total))

    def clamp(self, total: int) -> Window:
        span = max(1, min(self.span, max(1, total)))
        start = max(0, min(self.start, max(0, total - span)))
        return Window(start, span)

    def zoom(self, factor: float, around: int, total: int) -> Window:
        """Scale the span by `factor` (<1 zooms in), keeping `around` at the same place."""
        lo, hi = min(MIN_SPAN, max(1, total)), max(1, total)
        span = max(lo, min(hi, round(self.span * factor)))
        if span == self.span:  # rounding kept a small span: move by one step, within the bounds
            span = max(lo, min(hi, self.span + (1 if factor > 1 else -1)))
        rel = (around - self.start) / self.span if self.span else 0.5
        return Window(round(around - rel * span), span).follow(around, total)

    def pan(self, fraction: float, total: int) -> Window:
        shift = round(self.span * fraction) or (1 if fraction > 0 else -1)
        return Window(self.start + shift, self.span).clamp(total)

    def follow(self, row: int, total: int) -> Window:
        """The same span, moved as little as possible to show `row`."""
        if row < self.start:
            return Window(row, self.span).clamp(total)
        if row >= self.end:
            return Window(row - self.span + 1, self.span).clamp(total)
        return self.clamp(total)


@dataclass(frozen=True)
class Columns:
    """Which rows each of `n` terminal columns covers: [lo[c], hi[c])."""

    window: Window
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def of(cls, window: Window, n: int) -> Columns:
        c = np.arange(n + 1, dtype=np.int64)
        edges = window.start + (c * window.span) // max(1, n)
        lo, hi = edges[:-1], np.maximum(edges[1:], edges[:-1] + 1)
        return cls(window, lo, hi)

    @property
    def n(self) -> int:
        return len(self.lo)

    @property
    def stretched(self) -> bool:
        """True when every step gets at least one column of its own."""
        return self.window.span <= self.n

    def max(self, values: np.ndarray) -> np.ndarray:
        """Per-column maximum of a per-row array (rows past its end count as 0)."""
        values = _padded(values, self.window.end)
        if self.stretched:
            return values[self.lo]
        seg = values[self.window.start : self.window.end]
        return np.maximum.reduceat(seg, self.lo - self.window.start)

    def sum(self, values: np.ndarray) -> np.ndarray:
        values = _padded(values, self.window.end)
        if self.stretched:
            return values[self.lo]
        seg = values[self.window.start : self.window.end]
        return np.add.reduceat(seg, self.lo - self.window.start)

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Per-column mean of a per-row array (rows past its end count as 0)."""
        if self.stretched:
            return _padded(values, self.window.end)[self.lo].astype(np.float64)
        return self.sum(values) / (self.hi - self.lo)

    def of_row(self, row: int) -> tuple[int, int]:
        """The columns [first, last) that show `row`; (0, 0) when it is outside the window."""
        first = int(np.searchsorted(self.hi, row, side="right"))
        last = int(np.searchsorted(self.lo, row, side="right"))
        return (first, last) if first < last else (0, 0)

    def spans(self) -> list[tuple[int, int, int]]:
        """For a stretched window: (row, first column, last column) of each step."""
        out: list[tuple[int, int, int]] = []
        first = 0
        for c in range(1, self.n + 1):
            if c == self.n or self.lo[c] != self.lo[first]:
                out.append((int(self.lo[first]), first, c))
                first = c
        return out


def _padded(values: np.ndarray, length: int) -> np.ndarray:
    if len(values) >= length:
        return values
    return np.concatenate([values, np.zeros(length - len(values), dtype=values.dtype)])


def eighths(values: np.ndarray, scale: np.ndarray | float, height: int) -> np.ndarray:
    """Bar heights in eighths of a cell; any nonzero value shows at least one eighth."""
    scale = np.maximum(np.asarray(scale, dtype=np.float64), 1.0)
    frac = np.clip(values / scale, 0.0, 1.0)
    out = np.rint(frac * height * 8).astype(np.int64)
    return np.where((values > 0) & (out == 0), 1, out)
