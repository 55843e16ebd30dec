"""Helpers shared by the bench scripts (run as `python bench/NAME.py`, so this imports as `_common`).

Every figure is a ratio measured in one run: A and B alternate, each round
gives one ratio, and the median of the rounds is the figure (min and max
beside it). Absolute times are printed only next to their ratio.
"""

from __future__ import annotations

import os
import platform
import random
import resource
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

# Measure another revision's tracer with today's benches (the "before" figures in
# docs/performance.md): a directory holding a `tracer` package, e.g. made with
#   git archive 2bd79de tracer | tar -x -C /tmp/before
ALT_TRACER = os.environ.get("SCHEDSCOPE_BENCH_TRACER")
if ALT_TRACER:
    sys.path.insert(0, ALT_TRACER)


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def fmt_spread(values: Sequence[float], unit: str = "x", digits: int = 3) -> str:
    lo, med, hi = spread(values)
    return f"{med:.{digits}f}{unit} (min {lo:.{digits}f}, max {hi:.{digits}f}, n={len(values)})"


def mean_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = 10_000
) -> tuple[float, float, float]:
    """(low, mean, high): the mean of `values` and a bootstrap interval for it at `level` (the
    percentiles of `resamples` means of samples drawn with replacement; a fixed seed, so one
    run's figures print the same again). No normal or t assumption: the live bench's ratios
    have a long tail on the slow side (a run the host slowed)."""
    rng = random.Random(0)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    return means[int(tail * resamples)], statistics.fmean(values), means[int((1 - tail) * resamples) - 1]


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {platform.system()}"


def first_steps(source: Path, steps: int, out: Path) -> Path:
    """`out`: the first `steps` step records of `source` and the records before the next
    step (the header, runner records), written once (kept while it exists)."""
    if out.exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    n = 0
    with source.open("rb") as f, tmp.open("wb") as w:
        for line in f:
            if line.startswith(b'{"kind":"step"'):
                n += 1
                if n > steps:
                    break
            w.write(line)
    tmp.rename(out)
    return out
