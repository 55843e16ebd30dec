"""`schedscope diff` opens two traces without an index at once: B parsed in a child process
that leaves its sidecars, A here (tracer.opening.open_pair). Real traces from the recorder's
writer (bench/gen_trace.py), past the size below which no sidecar is kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tracer.analysis.compare import compare
from tracer.opening import open_pair
from tracer.render.compare import diff_lines
from tracer.trace import index_files, sidecar
from tracer.trace.errors import TraceError


def _older(out: Path, seed: int) -> Path:
    """An older trace: 2,400 steps at 256 running (about 24 MB), its recording index removed."""
    args = ["--steps", "2400", "--seed", str(seed), "--max-running", "256", "--arrival-rate", "3"]
    args += ["--kv-blocks", "8000", "--budget", "8192"]
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args],
        check=True,
        capture_output=True,
    )
    out.with_name(out.name + index_files.SUFFIX).unlink()
    assert out.stat().st_size >= sidecar.MIN_SOURCE_BYTES
    return out


@pytest.fixture(scope="module")
def older(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("pair")
    return _older(d / "a.jsonl", 3), _older(d / "b.jsonl", 4)


def _sidecars(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(index_files.SUFFIX))


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes] | None]:
    children: list[subprocess.Popen[bytes] | None] = []

    def child(path: str | Path, strict: bool) -> subprocess.Popen[bytes] | None:
        children.append(made := original(path, strict))
        return made

    original = open_pair._child
    monkeypatch.setattr(open_pair, "_child", child)
    return children


def test_b_is_parsed_in_a_child_and_the_diff_is_the_same(
    older: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list
) -> None:
    a, b = (tmp_path / p.name for p in older)
    for src, dst in zip(older, (a, b), strict=True):
        dst.hardlink_to(src)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(index_files.ENV_SIDECAR, "off")
    reference = list(diff_lines(compare(*open_pair.load_pair(a, b))))  # as before: two threads, no sidecar
    assert spawned == [None] and _sidecars(tmp_path) == []
    monkeypatch.delenv(index_files.ENV_SIDECAR)

    sa, sb = open_pair.load_pair(a, b)
    child = spawned[-1]
    assert child is not None and child.returncode == 0
    # The child's sidecars (B: the reader's, the step pass's, the request index's), A's reader
    # sidecar from this process; B's trace is the one its sidecar holds, not a parse.
    assert {f"b.jsonl{s}" for s in (".ssidx", ".steppass.ssidx", ".requests.ssidx")} <= set(
        _sidecars(tmp_path)
    )
    assert "a.jsonl.ssidx" in _sidecars(tmp_path)
    assert sb.trace.fingerprint is not None and sb.trace.entries is not None
    assert len(sb.trace) == 2400 and len(sa.trace) == 2400
    assert list(diff_lines(compare(sa, sb))) == reference

    # Both now open from their sidecars: no child.
    again = list(diff_lines(compare(*open_pair.load_pair(a, b))))
    assert spawned[-1] is child and again == reference


def test_a_bad_b_is_named_by_this_process(
    older: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a = tmp_path / "a.jsonl"
    a.hardlink_to(older[0])
    b = tmp_path / "b.jsonl"
    lines = older[1].read_bytes().splitlines(keepends=True)
    step = next(line for line in reversed(lines) if line.startswith(b'{"kind":"step"'))
    b.write_bytes(b"".join(lines) + step)  # a step after the footer
    with pytest.raises(TraceError) as caught:
        open_pair.load_pair(a, b)
    assert str(b) in str(caught.value) and "footer" in str(caught.value)
    child = spawned[-1]
    assert child is not None and child.returncode not in (0, None)  # it failed too, quietly
    assert not (tmp_path / "b.jsonl.ssidx").exists()
    # Lenient: the steps before the bad record, from the child's sidecar, with the problem kept
    # (A's sidecars removed: with one, A opens at once and B is parsed here).
    for kept in tmp_path.glob("a.jsonl.*"):
        kept.unlink()
    _, sb = open_pair.load_pair(a, b, strict=False)
    assert (tmp_path / "b.jsonl.ssidx").exists()
    assert spawned[-1] is not child and spawned[-1].returncode == 0
    assert len(sb.trace) == 2400 and sb.trace.problems
