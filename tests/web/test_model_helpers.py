"""The model-level helpers the web app added to tracer (no dash inside)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tracer.analysis.budget import analyze
from tracer.analysis.compare import compare
from tracer.analysis.series import step_series
from tracer.render.compare import diff_lines
from tracer.render.flags import message
from tracer.render.text import compare_totals
from tracer.trace.errors import TraceError
from tracer.trace.ingest import load_bytes

from .helpers import ADDITIVE, SEPARATE, lines, sample


def test_series_are_the_model_values() -> None:
    trace = sample("dflash_k7_additive.jsonl")
    a = analyze(trace)
    s = step_series(trace, a)
    assert s["input_target"].tolist()[:4] == [8185] * 4
    assert s["input_reserved"].tolist()[:6] == [7] * 6
    assert s["reserved_excess"].tolist()[:6] == [7] * 6  # DFlash needs none of its slots in the target pass
    assert s["withheld"].tolist() == a.withheld.tolist() == [7, 7, 7, 7, 0, 0, 0]
    assert all(len(v) == len(trace) for v in s.values())


def test_totals_are_the_rows_of_schedscope_diff() -> None:
    c = compare(sample("dflash_k7_additive.jsonl"), sample("dflash_k7_separate.jsonl"))
    text = diff_lines(c)
    start = text.index(f"{'':24}{'A':>12}{'B':>12}{'B-A':>10}") + 1
    mine = [f"{t.label:24}{t.cells()[0]:>12}{t.cells()[1]:>12}{t.cells()[2]:>10}" for t in compare_totals(c)]
    assert mine == text[start : start + len(mine)]
    assert text[start + len(mine)] == ""


def test_load_bytes_reads_plain_gzip_and_torn_traces() -> None:
    data = ADDITIVE.read_bytes()
    plain = load_bytes(data, "a.jsonl")
    assert len(plain) == 7
    assert np.array_equal(
        load_bytes(gzip.compress(data), "a.jsonl.gz").columns["target_used"], plain.columns["target_used"]
    )
    torn = load_bytes(b"".join(lines(SEPARATE)[:-1])[:-40], "torn.jsonl")  # no footer, last step cut
    assert torn.torn is not None and len(torn) == len(sample("dflash_k7_separate.jsonl")) - 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"hello world\n", "not a JSON record"),
        (b'{"kind":"step","step":1}\n', "the first record must be a header"),
        (b"\x28\xb5\x2f\xfd....", "not a readable zstd file"),
        (b"\x1f\x8bnot really gzip", "not a readable gzip file"),
        (b'{"kind":"header","schema":"9.0","config":{}}\n', "newer than this schedscope reads"),
    ],
)
def test_load_bytes_rejects_bad_content_clearly(data: bytes, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_bytes(data, "bad.jsonl")


def test_load_bytes_bounds_decompression() -> None:
    bomb = gzip.compress(b" " * 5_000_000)
    with pytest.raises(TraceError, match="decompresses to more than"):
        load_bytes(bomb, "bomb.gz", max_decompressed=1_000_000)


@pytest.mark.parametrize(
    ("kinds", "text"),
    [
        (None, None),
        (["limit-holds-waiting"], None),
        (None, "max_num_seqs=8 kept 4"),
        (None, "17"),  # a step number (and "117 of 128" in some sentences)
        (None, "nothing"),
    ],
)
def test_the_flag_table_filters_the_columns_as_it_would_the_flags(
    kinds: list[str] | None, text: str | None
) -> None:
    """The flag table filters positions over the report's columns and sentences (no Flag
    objects): the same flags, in the same order, as a filter over the Flag objects; a page
    makes only its own."""
    from tracer.analysis.session import Session
    from web.flagtable import PAGE_SIZE, filter_flags, page

    listed = Session(sample("live_cpu_ngram.jsonl")).report.flags
    needle = (text or "").lower()
    want = [
        f
        for f in listed
        if (not kinds or f.kind in kinds)
        and (not needle or needle in message(f).lower() or needle in f.kind or needle == str(f.step))
    ]
    found = filter_flags(listed, kinds, text)
    assert listed.take(found) == want
    if text == "nothing":
        assert not want
    elif text == "17":
        assert 17 in [f.step for f in want] and "17" not in message(listed[14])  # step 17: by its number
    elif text is None:
        assert len(want) > PAGE_SIZE
        shown, current, count = page(found, 1)
        assert (current, count) == (1, -(-len(want) // PAGE_SIZE))
        assert listed.take(shown) == want[PAGE_SIZE : 2 * PAGE_SIZE]
