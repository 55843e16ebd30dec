from __future__ import annotations

import numpy as np

from web.decimate import row_range, select_rows, step_points, thin


def test_small_ranges_are_sent_whole() -> None:
    y = np.arange(100)
    assert select_rows([y], 10, 60, 4000).tolist() == list(range(10, 60))


def test_large_ranges_fit_the_budget_and_keep_every_extreme() -> None:
    rng = np.random.default_rng(0)
    n = 1_000_003  # not a multiple of any bucket width
    a = rng.integers(0, 100, n)
    b = rng.integers(0, 100, n)
    spikes = [17, 500_000, n - 2]
    a[spikes] = 10_000  # single-step spikes, like one flagged step's band
    b[123_456] = -5
    rows = select_rows([a, b], 0, n, 4000)
    assert len(rows) <= 4000
    assert np.all(np.diff(rows) > 0)
    assert rows[0] == 0 and rows[-1] == n - 1
    assert set(spikes) <= set(rows.tolist())
    assert 123_456 in rows


def test_a_sub_range_is_decimated_within_it() -> None:
    y = np.arange(50_000) % 97
    rows = select_rows([y], 20_000, 30_000, 1000)
    assert len(rows) <= 1000
    assert rows.min() == 20_000 and rows.max() == 29_999


def test_row_range_maps_steps_with_one_row_of_margin() -> None:
    steps = np.arange(1, 101)
    assert row_range(steps, None, None) == (0, 100)
    assert row_range(steps, 10.2, 20.7) == (9, 21)  # steps 10..21: the lines reach both edges
    assert row_range(steps, 500, 600) == (99, 100)


def test_thin_keeps_at_most_the_budget_evenly() -> None:
    rows = np.arange(10_000)
    kept = thin(rows, 100)
    assert len(kept) <= 100 and kept[0] == 0 and kept[-1] == 9_999
    assert thin(rows[:50], 100).tolist() == list(range(50))


def _drawn(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The value an "hv" line through (x, y) shows at each of `at`: its last point's at or before."""
    return y[np.searchsorted(x, at, "right") - 1]


def test_step_points_draw_the_same_step_line_and_keep_a_point_in_every_cell() -> None:
    rng = np.random.default_rng(1)
    x = np.sort(rng.choice(np.arange(1, 500_000), 3_999, replace=False))
    # Long runs (a cap that moves twice, a count that steps now and then) and a noisy stretch.
    y = np.repeat(rng.integers(0, 5, 40), 100)[: len(x)]
    y[1_000:1_200] = rng.integers(0, 1_000, 200)
    kept = step_points(x, y, cells=100)
    assert kept[0] == 0 and kept[-1] == len(x) - 1
    assert len(kept) < len(x) // 4
    # Drawn from the kept points, the line shows every original point's value.
    assert np.array_equal(_drawn(x[kept], y[kept], x), y)
    # Hover: every hundredth of the x range holds a kept point, and the two kept points
    # around any original one hold its value (a run's ends bracket it).
    cells = ((x[kept] - x[0]) * 100 // (x[-1] - x[0])).astype(int)
    assert set(range(100)) <= set(cells.tolist())
    left = np.searchsorted(x[kept], x, "right") - 1
    right = np.minimum(left + 1, len(kept) - 1)
    inside = (y[kept][left] == y) & ((y[kept][right] == y) | (x[kept][left] == x))
    assert inside.all()


def test_a_constant_line_keeps_its_ends_and_one_point_a_cell() -> None:
    x = np.arange(10_000)
    kept = step_points(x, np.full(10_000, 8192), cells=100)
    assert kept[0] == 0 and kept[-1] == 9_999
    assert 100 <= len(kept) <= 102
    assert step_points(x[:2], np.array([1, 1])).tolist() == [0, 1]
