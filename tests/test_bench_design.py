"""The live bench's design: the rounds' orders balance place and predecessor, and the verdict's
interval is a bootstrap interval of the mean that covers as it says."""

from __future__ import annotations

import json
import random
import statistics
import sys
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from _common import mean_interval  # noqa: E402
from live_overhead import williams_orders  # noqa: E402


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_williams_orders_balance_place_and_predecessor(n: int) -> None:
    rows = williams_orders(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    per = len(rows) // n
    for place in range(n):  # each contender in each place equally often
        assert Counter(row[place] for row in rows) == dict.fromkeys(range(n), per)
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    # every ordered pair once (an even n) or twice (an odd n, the mirrored rows)
    assert follows == {(a, b): per for a in range(n) for b in range(n) if a != b}


def test_williams_orders_of_the_bench_with_the_control() -> None:
    # stock, control, traced, streamed: B no longer always comes right after A'
    rows = williams_orders(4)
    assert rows[0] == [0, 1, 3, 2]
    assert {row[row.index(2) - 1] for row in rows if row.index(2)} == {0, 1, 3}


def test_mean_interval_holds_the_mean_and_covers() -> None:
    lo, mean, hi = mean_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == 3.0 and lo < mean < hi
    assert mean_interval([2.0] * 8) == (2.0, 2.0, 2.0)
    # 95% intervals of 40 draws from a known mean hold it in about 95 of 100 samples
    rng = random.Random(7)
    held = 0
    for _ in range(100):
        values = [rng.gauss(1.0, 0.046) for _ in range(40)]
        lo, mean, hi = mean_interval(values, resamples=2_000)
        assert lo <= statistics.fmean(values) <= hi
        held += lo <= 1.0 <= hi
    assert 85 <= held <= 100


def test_pool_reads_the_committed_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from live_overhead import main, workload_of

    committed = sorted((BENCH / "data" / "live_overhead").glob("*.json"))
    by_workload: dict[str, list[Path]] = {}
    for f in committed:
        by_workload.setdefault(workload_of(json.loads(f.read_text())["header"]), []).append(f)
    assert len(by_workload) >= 2 and max(map(len, by_workload.values())) >= 7
    for files in by_workload.values():
        assert main(["--pool", *map(str, files)]) == 0
        out = capsys.readouterr().out
        rounds = sum(len(json.loads(f.read_text())["runs"]["stock"]) for f in files)
        assert f"{rounds} rounds, median per round" in out
        assert "A'/A output tok/s mean" in out and "B/(A+A')/2 TPOT p50 mean" in out
    one, other_load = [group[0] for group in by_workload.values()][:2]
    with pytest.raises(SystemExit, match=rf"{other_load.name}: workload"):
        main(["--pool", str(one), str(other_load)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"header": "h", "runs": {"stock": [], "traced": []}}))
    with pytest.raises(SystemExit, match=r"other\.json: contenders"):
        main(["--pool", str(committed[0]), str(other)])
    torn = tmp_path / "torn.json"
    torn.write_text(committed[0].read_text()[:500])
    with pytest.raises(SystemExit, match=r"torn\.json: not a rounds\.json of this bench"):
        main(["--pool", str(torn)])


def test_saved_rounds_pool_as_they_were(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the bench saves after each round is a whole rounds.json, its host named, that
    --pool reads back to the same rounds; saving again replaces it whole."""
    from live_overhead import Contender, main, save_rounds

    committed = json.loads(sorted((BENCH / "data" / "live_overhead").glob("*paused*.json"))[0].read_text())
    cs = [Contender(name, [], {}, runs=runs[:2]) for name, runs in committed["runs"].items()]
    save_rounds(tmp_path, "a host", "a header", cs)
    for c in cs:
        c.runs = committed["runs"][c.name][:3]
    save_rounds(tmp_path, "a host", "a header", cs)
    saved = json.loads((tmp_path / "rounds.json").read_text())
    assert saved["host"] == "a host"
    assert saved["runs"] == {name: runs[:3] for name, runs in committed["runs"].items()}
    assert not list(tmp_path.glob("*.tmp"))
    assert main(["--pool", str(tmp_path / "rounds.json")]) == 0
    out = capsys.readouterr().out
    assert "3 rounds; a host; a header" in out and "3 rounds, median per round" in out
