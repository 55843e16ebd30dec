"""One codec (tracer.trace.codec): plain, gzip and zstd told apart by their first bytes, in the
reader, the source and uploads alike. A zstd trace named like a plain one opens the same
way in `summary`, `load`, a TraceSource and an upload (the TUI's and the web app's own
tests open one too: tests/tui/test_app.py, tests/web/test_callbacks.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import zstandard

from tests.test_source import tiled
from tests.test_store import assert_same_steps
from tracer.cli import main
from tracer.trace import codec
from tracer.trace.errors import TraceError
from tracer.trace.ingest import load_bytes
from tracer.trace.reader import load
from tracer.trace.source import TraceSource

ROOT = Path(__file__).resolve().parent.parent
ADDITIVE = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"


def zstd_frames(data: bytes, frames: int = 1) -> bytes:
    """`data` as `frames` zstd frames, one after another (as appended writes make them)."""
    c = zstandard.ZstdCompressor()
    cut = -(-len(data) // frames)
    return b"".join(c.compress(data[i : i + cut]) for i in range(0, len(data), cut))


@pytest.fixture
def unsuffixed(tmp_path: Path) -> Path:
    """The additive sample, zstd-compressed in two frames, named like a plain trace."""
    path = tmp_path / "additive.jsonl"
    path.write_bytes(zstd_frames(ADDITIVE.read_bytes(), 2))
    return path


def test_kind_is_told_by_the_first_bytes() -> None:
    data = ADDITIVE.read_bytes()
    assert codec.kind_of(data[: codec.HEAD]) == "plain"
    assert codec.kind_of(gzip.compress(data)[: codec.HEAD]) == "gzip"
    assert codec.kind_of(zstd_frames(data)[: codec.HEAD]) == "zstd"
    assert codec.kind_of(b"") == "plain"


@pytest.mark.parametrize("frames", [1, 3])
def test_decode_reads_every_frame_and_member(frames: int) -> None:
    data = tiled(300)
    assert codec.decode("x", zstd_frames(data, frames)) == (data, None)
    members = gzip.compress(data[:1000]) + gzip.compress(data[1000:])
    assert codec.decode("x", members) == (data, None)
    assert codec.decode_bounded(zstd_frames(data, frames), "x", len(data)) == data
    assert codec.decode_bounded(members, "x", len(data)) == data


def test_a_cut_zstd_keeps_what_decompressed_leniently_and_is_refused_strictly() -> None:
    packed = zstd_frames(tiled(300), 2)
    data, note = codec.decode("x", packed[:-7])
    assert note == "zstd stream cut short; kept what decompressed" and len(data) > 0
    with pytest.raises(TraceError, match="zstd stream cut short"):
        codec.decode_bounded(packed[:-7], "x", 1 << 30)
    with pytest.raises(TraceError, match="decompresses to more than 1,000 bytes"):
        codec.decode_bounded(zstd_frames(b" " * 5_000_000), "bomb", 1_000)


def test_summary_of_a_zstd_trace_without_the_suffix_is_the_plain_ones(
    unsuffixed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summary", str(ADDITIVE)]) == 0
    plain = capsys.readouterr().out
    assert main(["summary", str(unsuffixed)]) == 0
    assert capsys.readouterr().out == plain.replace(str(ADDITIVE), str(unsuffixed))


def test_load_and_a_source_read_a_zstd_trace_without_the_suffix(unsuffixed: Path) -> None:
    expected = load(ADDITIVE)
    assert_same_steps(expected, load(unsuffixed))
    assert load(unsuffixed).problems == []
    source = TraceSource.file(unsuffixed)
    assert source.start().join(10)
    assert source.trace is not None
    assert all(np.array_equal(source.trace.columns[k], v) for k, v in expected.columns.items())


def test_a_gzip_suffix_does_not_make_a_plain_file_gzip(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl.gz"
    path.write_bytes(ADDITIVE.read_bytes())
    assert_same_steps(load(ADDITIVE), load(path))


def test_an_upload_reads_zstd() -> None:
    data = ADDITIVE.read_bytes()
    uploaded = load_bytes(zstd_frames(data, 2), "upload")
    assert np.array_equal(uploaded.columns["target_used"], load_bytes(data, "a").columns["target_used"])
