"""tracer.trace.sidecar: a big trace's columns saved after the first load, mapped on the next.

A sidecar is trusted only while it describes the file exactly (size, mtime, the hashes
of its ends) and is itself whole; anything else is parsed again, never misread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tests.test_store import SAMPLES, members_gz
from tracer.trace import builder, columns, index_files, reader, sidecar, sidecar_restore
from tracer.trace.errors import TraceError
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace


@pytest.fixture(autouse=True)
def _sidecars_for_small_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)  # the sample traces are small
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def parse_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, a load that parses the trace fails: it must come from its sidecar."""

    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("parsed the trace instead of using its sidecar")

    monkeypatch.setattr(reader, "_parse_plain", refuse)
    monkeypatch.setattr(reader, "_parse_gzip", refuse)


def assert_same(a: Trace, b: Trace) -> None:
    assert len(a) == len(b)
    for name, column in a.columns.items():
        np.testing.assert_array_equal(b.columns[name], column, err_msg=name)
        assert b.columns[name].dtype == column.dtype
    for name, column in a.runner.items():
        np.testing.assert_array_equal(b.runner[name], column, err_msg=name)
    np.testing.assert_array_equal(b._spans, a._spans)
    assert (b.header, b.footer, b.gaps, b.hooks, b.torn) == (a.header, a.footer, a.gaps, a.hooks, a.torn)
    assert [str(p) for p in b.problems] == [str(p) for p in a.problems]
    assert b.path == a.path
    if len(a):
        assert b.step(len(b) - 1) == a.step(len(a) - 1) and b.step(0) == a.step(0)


def copy(src: Path, tmp_path: Path, name: str = "t.jsonl") -> Path:
    path = tmp_path / "traces" / name
    path.parent.mkdir(exist_ok=True)
    shutil.copy(src, path)
    return path


def side(path: Path) -> Path:
    return path.with_name(path.name + ".ssidx")


@pytest.mark.parametrize("src", SAMPLES, ids=lambda p: p.stem)
def test_reopen_maps_the_sidecar_and_equals_a_parse(src: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = copy(src, tmp_path)
    first = load(path)
    assert side(path).exists()
    parsed = load(path, sidecar=False)
    assert_same(parsed, first)
    parse_refused(monkeypatch)
    again = load(path)
    assert_same(parsed, again)
    assert type(again.store) is type(parsed.store)


def test_multi_member_gzip_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = members_gz(SAMPLES[-1], tmp_path / "t.jsonl.gz", member_bytes=1024)
    first = load(path)
    parsed = load(path, sidecar=False)
    with monkeypatch.context() as m:
        parse_refused(m)
        again = load(path)
    assert_same(parsed, again)
    np.testing.assert_array_equal(again.store.members, first.store.members)  # type: ignore[attr-defined]
    assert [again.step(i) for i in range(len(again))] == [parsed.step(i) for i in range(len(parsed))]


def test_member_index_past_the_end_is_not_trusted(tmp_path: Path) -> None:
    path = members_gz(SAMPLES[-1], tmp_path / "t.jsonl.gz", member_bytes=1024)
    parsed = load(path, sidecar=False)
    load(path)
    meta, arrays, _ = read_sidecar(path)
    members = arrays["members"].copy()
    members["clen"][-1] += 10_000  # past the end of the .gz
    sidecar.write(path, meta, {**arrays, "members": members})
    again = load(path)
    assert_same(parsed, again)
    assert int(again.store.members["clen"][-1]) < 10_000  # type: ignore[attr-defined]


def read_sidecar(path: Path) -> tuple[dict, dict, str]:
    with open(path, "rb") as f:
        found = sidecar.read(path, f.fileno(), os.fstat(f.fileno()), sidecar_restore.SIDECAR_ARRAYS)
    assert found is not None
    return found


def big_trace(tmp_path: Path) -> Path:
    """A trace several times 64 KiB (the hashed ends), of recorder-shaped steps."""
    from tests.test_reader import header, step

    records = [header(), *(step(i, used=i % 13) for i in range(1, 4000)), {"kind": "footer"}]
    path = tmp_path / "traces" / "big.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    assert path.stat().st_size > 4 * 64 * 1024
    return path


def _bad(tmp_path: Path, damage, src: Path | None = None) -> None:  # type: ignore[no-untyped-def]
    """Damage a loaded trace's sidecar (or the trace): the next load must parse again,
    equal a load without sidecars, and replace the sidecar with a good one."""
    path = copy(src or SAMPLES[-1], tmp_path)
    load(path)
    damage(path, side(path))
    parses: list[str] = []
    original = builder.TraceBuilder.finish

    def counting(self):  # type: ignore[no-untyped-def]
        parses.append(self.path)
        return original(self)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(builder.TraceBuilder, "finish", counting)
        got = load(path)
    assert parses == [str(path)], "the damaged sidecar was trusted"
    assert_same(load(path, sidecar=False), got)
    read_sidecar(path)  # rewritten whole


def test_truncated_sidecar_is_rebuilt(tmp_path: Path) -> None:
    _bad(tmp_path, lambda t, s: s.write_bytes(s.read_bytes()[:-100]))
    _bad(tmp_path, lambda t, s: s.write_bytes(s.read_bytes()[:20]))
    _bad(tmp_path, lambda t, s: s.write_bytes(b""))


def test_corrupt_magic_or_version_or_meta_is_rebuilt(tmp_path: Path) -> None:
    _bad(tmp_path, lambda t, s: s.write_bytes(b"XXXXX" + s.read_bytes()[5:]))
    _bad(tmp_path, lambda t, s: s.write_bytes(s.read_bytes().replace(b'"version":1', b'"version":9', 1)))
    _bad(tmp_path, lambda t, s: s.write_bytes(s.read_bytes().replace(b'"rows"', b'"rowz"', 1)))

    def wrong_dtype(t: Path, s: Path) -> None:
        data = s.read_bytes()
        s.write_bytes(data.replace(b"('step', '<i8')", b"('step', '<i4')", 1))

    _bad(tmp_path, wrong_dtype)


def test_sidecar_of_another_or_changed_file_is_rebuilt(tmp_path: Path) -> None:
    other = copy(SAMPLES[0], tmp_path, "other.jsonl")
    load(other)
    _bad(tmp_path, lambda t, s: shutil.copy(side(other), s))  # another trace's sidecar

    def shorter(t: Path, s: Path) -> None:  # size: the last record dropped
        data = t.read_bytes()
        t.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])

    def touched(t: Path, s: Path) -> None:  # mtime only: maybe rewritten with the same bytes count
        st = t.stat()
        os.utime(t, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    def edited(where: str):  # type: ignore[no-untyped-def]
        def edit(t: Path, s: Path) -> None:  # one digit of a step number; size and mtime kept
            st = t.stat()
            data = bytearray(t.read_bytes())
            at = (data.rindex if where == "tail" else data.index)(b'"used":') + 7
            data[at] = ord("9") if data[at] != ord("9") else ord("8")
            t.write_bytes(bytes(data))
            os.utime(t, ns=(st.st_atime_ns, st.st_mtime_ns))

        return edit

    _bad(tmp_path, shorter)
    _bad(tmp_path, touched)
    big = big_trace(tmp_path)
    _bad(tmp_path, edited("head"), big)
    _bad(tmp_path, edited("tail"), big)


def test_a_plain_file_that_grew_parses_only_the_new_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = SAMPLES[-1].read_bytes()
    lines = src.splitlines(keepends=True)
    cut = sum(map(len, lines[: len(lines) // 2])) + 25  # mid-record: the first load is torn there
    path = tmp_path / "grow.jsonl"
    path.write_bytes(src[:cut])
    early = load(path)
    assert early.torn is not None
    with open(path, "ab") as f:
        f.write(src[cut:])
    fed: list[int] = []
    original = builder.TraceBuilder._feed_window

    def counting(self, chunk):  # type: ignore[no-untyped-def]
        fed.append(len(chunk))
        return original(self, chunk)

    monkeypatch.setattr(builder.TraceBuilder, "_feed_window", counting)
    grown = load(path)
    assert sum(fed) == len(src) - early.torn.offset, "parsed more than the new tail"
    monkeypatch.undo()
    assert_same(load(path, sidecar=False), grown)
    assert grown.torn is None


def test_strict_load_never_takes_a_lenient_sidecar_with_problems(tmp_path: Path) -> None:
    src = SAMPLES[-1].read_bytes().splitlines(keepends=True)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(src[:3]) + b"{not json\n" + b"".join(src[3:]))
    lenient = load(path, strict=False)
    assert lenient.problems and side(path).exists()
    with pytest.raises(TraceError, match=r"bad\.jsonl:4: not a JSON record"):
        load(path)
    again = load(path, strict=False)
    assert_same(lenient, again)


def test_a_lenient_load_takes_a_strict_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = copy(SAMPLES[-1], tmp_path)
    strict = load(path)
    parse_refused(monkeypatch)
    assert_same(strict, load(path, strict=False))


def test_unwritable_everywhere_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = copy(SAMPLES[-1], tmp_path)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))  # mkdir under a file fails

    def no_write(target: Path, *args: object, **kw: object) -> None:
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(sidecar, "open", no_write, raising=False)
    assert_same(load(path, sidecar=False), load(path))
    assert not side(path).exists() and not list(tmp_path.glob("**/*.ssidx"))


def test_read_only_directory_uses_the_cache_dir(tmp_path: Path) -> None:
    """A real read-only directory: a read-only bind mount in a private mount namespace
    when running as root (root ignores permission bits), else a chmod."""
    path = copy(SAMPLES[-1], tmp_path)
    cache = tmp_path / "cache"
    script = (
        "import sys; from tracer.trace import sidecar; from tracer.trace.reader import load;"
        "sidecar.MIN_SOURCE_BYTES = 0; t = load(sys.argv[1]); t2 = load(sys.argv[1]);"
        "print(len(t), len(t2), t.step(len(t) - 1) == t2.step(len(t2) - 1))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)}
    cmd = [sys.executable, "-c", script, str(path)]
    d = str(path.parent)
    if os.geteuid() == 0:
        if not shutil.which("unshare"):
            pytest.skip("running as root without unshare: no way to make a read-only directory")
        shell = (
            f"mount --bind {d} {d} && mount -o remount,ro,bind {d} || exit 98; "
            f'if touch {d}/probe 2>/dev/null; then exit 97; fi; exec "$@"'
        )
        cmd = ["unshare", "-m", "sh", "-c", shell, "sh", *cmd]
    else:
        os.chmod(d, 0o555)
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(d, 0o755)
    if out.returncode == 98:
        pytest.skip(f"cannot make a read-only bind mount here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(load(path, sidecar=False)))] * 2 + ["True"]
    assert not side(path).exists()
    made = list(cache.glob("schedscope/*.ssidx"))
    assert len(made) == 1 and made[0].name.startswith("t.jsonl.")
    assert made == [index_files.locations(path)[1]]


def test_sidecar_layout_is_magic_meta_and_aligned_arrays(tmp_path: Path) -> None:
    path = copy(SAMPLES[-1], tmp_path)
    load(path)
    data = side(path).read_bytes()
    assert data.startswith(sidecar.MAGIC)
    n = int.from_bytes(data[len(sidecar.MAGIC) : len(sidecar.MAGIC) + 8], "little")
    meta = orjson.loads(data[len(sidecar.MAGIC) + 8 : len(sidecar.MAGIC) + 8 + n])
    assert meta["version"] == sidecar.VERSION and meta["total"] == len(data) and meta["strict"] is True
    assert meta["source"]["size"] == path.stat().st_size
    for spec in meta["arrays"].values():
        assert (meta["data"] + spec["offset"]) % 64 == 0
    rows = np.frombuffer(data, columns.ROW_DTYPE, count=meta["arrays"]["rows"]["count"], offset=meta["data"])
    np.testing.assert_array_equal(rows["step"], load(path, sidecar=False).columns["step"])


def test_small_traces_get_no_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 16 << 20)
    path = copy(SAMPLES[-1], tmp_path)
    load(path)
    assert not side(path).exists()


def test_sidecar_off_neither_writes_nor_reads_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = copy(SAMPLES[-1], tmp_path)
    monkeypatch.setenv("SCHEDSCOPE_SIDECAR", "off")
    load(path)
    assert not side(path).exists() and not any((tmp_path / "cache").rglob("*.ssidx"))
    monkeypatch.delenv("SCHEDSCOPE_SIDECAR")
    first = load(path)
    assert side(path).exists()
    monkeypatch.setenv("SCHEDSCOPE_SIDECAR", "off")
    parsed: list[int] = []
    original = reader._parse_plain
    monkeypatch.setattr(reader, "_parse_plain", lambda *a: parsed.append(1) or original(*a))
    assert_same(load(path), first)
    assert parsed == [1]  # parsed again: the sidecar was not read
