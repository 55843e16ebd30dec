"""The totals of a comparison as values, for views that lay them out themselves.

The same rows, in the same order, as the totals block of `schedscope diff`
(tracer.analysis.compare.diff_lines); tests/web/test_model_helpers.py keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracer.analysis.compare import DELTA_COLUMNS, Comparison


@dataclass(frozen=True)
class Total:
    label: str
    a: float
    b: float
    digits: int = 0  # decimals to show

    @property
    def delta(self) -> float:
        return self.b - self.a

    def cells(self) -> tuple[str, str, str]:
        fmt = f"{{:.{self.digits}f}}"
        return fmt.format(self.a), fmt.format(self.b), fmt.format(self.delta)


def compare_totals(c: Comparison) -> list[Total]:
    a, b = c.a, c.b
    rows = [
        Total("steps to drain", a.steps_to_drain, b.steps_to_drain),
        Total("target tokens / step", a.tokens_per_step, b.tokens_per_step, 1),
    ]
    for name in DELTA_COLUMNS:
        va, vb = c.values[name]
        rows.append(Total(f"{name} (sum)", int(va.sum()), int(vb.sum())))
    rows.append(Total("flags", len(a.flags.flags), len(b.flags.flags)))
    rows.append(Total("tokens lost (additive)", a.flags.tokens_lost, b.flags.tokens_lost))
    return rows
