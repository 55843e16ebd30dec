from __future__ import annotations

import numpy as np

from web.decimate import row_range, select_rows, thin


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
