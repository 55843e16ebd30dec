"""Open a trace file: the door every whole load goes through (`load`, `reopen`, `open_builder`).

- Plain, gzip and (when the `zstandard` module is present) zstd files, told apart by their
  first bytes (tracer.trace.codec), whatever their names.
- A torn last line, as from a killed server, is expected: every complete step
  loads and `Trace.torn` says where the file tore.
- A malformed line raises TraceError naming the file, line and field. With
  strict=False it is skipped and kept in `Trace.problems` instead.
- A newer major schema version is refused; older minors and unknown keys are fine.

Parsing and validation are TraceBuilder's (tracer.trace.builder), which takes bytes
incrementally, so a follower of a growing file or a live stream reuses them.
open_builder() gives a follower of a plain file one that keeps only columns (steps are
read back from the file).

Memory: a Trace (tracer.trace.trace_type) holds its columns; where each step's record lives
is its store (tracer.trace.store). load() never holds a plain file (4 MiB windows, then a
FileStore) nor a multi-member gzip file (member by member, then a
GzipMemberStore); a single-member gzip and a zstd file are held decompressed, as before.
A big trace's columns are saved in a sidecar (tracer.trace.sidecar_restore) after the
first load and mapped on the next.
"""

from __future__ import annotations

import fcntl
import os
import stat
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from tracer.trace import codec, schema, sidecar
from tracer.trace.builder import Progress, TraceBuilder
from tracer.trace.errors import TraceError, TraceHeaderError
from tracer.trace.rows import with_defaults
from tracer.trace.sidecar_restore import from_sidecar, write_sidecar
from tracer.trace.store import MEMBER_DTYPE, PIECE, FileStore, GzipMemberStore, file_identity
from tracer.trace.trace_type import EntriesWanted, Torn, Trace, entries_of

__all__ = ["kept_footer", "load", "open_builder", "reopen"]


# A plain file is parsed this many bytes at a time: the reader never holds more of it.
_WINDOW = 4 << 20


def open_builder(path: str | Path, *, strict: bool = True, kind: codec.Kind | None = None) -> TraceBuilder:
    """A TraceBuilder for bytes read from `path` from its start, storing them where they
    are: a plain file's steps are read back from the file, so a follower of a growing
    file holds only columns; compressed bytes (fed decompressed) are kept in memory.
    `kind`: the file's compression, from its first bytes (codec.kind_of); without it, a
    file with no bytes yet is taken as compressed when its name ends in .gz or .zst."""
    path = Path(path)
    if kind is None:
        kind = "gzip" if path.suffix == ".gz" else "zstd" if path.suffix == ".zst" else "plain"
    if kind != "plain":
        return TraceBuilder(path, strict=strict)
    return TraceBuilder(path, strict=strict, store=FileStore(path))


def _parse_plain(
    builder: TraceBuilder, fd: int, size: int, progress: Progress | None
) -> tuple[TraceBuilder, Torn | None, None]:
    """Parse a plain file window by window from where `builder` stands, up to `size`
    (the size when it was opened: a file that grows meanwhile loads as it was). Each
    window is read from the first unparsed byte: the partial line at a window's end is
    read again with the next rather than copied onto it."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # a longer readahead
    pos, window, done = builder._pos, _WINDOW, 0
    while pos < size:
        chunk = os.pread(fd, min(window, size - pos), pos)
        if not chunk:
            break  # truncated while loading: what was there loads
        builder._feed_window(chunk)
        if progress is not None and pos + len(chunk) > done:
            done = pos + len(chunk)
            progress(done, size)
        if pos + len(chunk) >= size:
            break
        # No line ended in the window: a record longer than it; read a longer one.
        window = window * 2 if builder._pos == pos else _WINDOW
        pos = builder._pos
    return builder, builder.finish(), None


def _parse_gzip(
    path: Path, fd: int, st: os.stat_result, strict: bool, progress: Progress | None, entries: bool = False
) -> tuple[TraceBuilder, Torn | None, str | None]:
    """Decompress member by member, noting where each is. One member (an old `.gz`):
    its bytes stay in memory, as they always did. Several (the recorder writes one
    per ~1 MiB): each is parsed and dropped, and a GzipMemberStore reads steps back."""
    size = st.st_size
    members: list[tuple[int, int, int, int]] = []  # (compressed offset, length, uncompressed start, length)
    first: bytearray | None = bytearray()  # the first member's output, until a second one shows up
    builder: TraceBuilder | None = None
    store: GzipMemberStore | None = None
    note: str | None = None
    fpos = ustart = 0
    while fpos < size:
        coff, ulen, d, ended = fpos, 0, zlib.decompressobj(wbits=31), False
        while True:  # one member, in the pieces inflate_member() uses
            piece = os.pread(fd, min(PIECE, size - fpos), fpos)
            if piece:
                try:
                    out = d.decompress(piece)
                except zlib.error as exc:
                    note = f"gzip data corrupt ({exc}); kept what decompressed"
                    out, ended, fpos = b"", True, fpos + len(piece)
            else:
                out, note, ended = d.flush(), "gzip stream cut short; kept what decompressed", True
            if out:
                ulen += len(out)
                if builder is None:
                    first += out  # type: ignore[operator]
                else:
                    builder.feed(out)
            if ended:
                break
            if d.eof:
                fpos += len(piece) - len(d.unused_data)
                break
            fpos += len(piece)
        if ulen:
            members.append((coff, fpos - coff, ustart, ulen))
            ustart += ulen
        if progress is not None and builder is not None:
            progress(fpos, size)
        if ended:
            break
        if builder is None and fpos < size:  # a second member: index them, hold none
            store = GzipMemberStore(path, np.zeros(0, MEMBER_DTYPE), file_identity(st), fd=os.dup(fd))
            builder = TraceBuilder(path, strict=strict, store=store, entries=entries)
            for at in range(0, len(first), _WINDOW):  # type: ignore[arg-type]
                builder.feed(bytes(first[at : at + _WINDOW]))  # type: ignore[index]
            first = None
    if builder is None:
        builder = TraceBuilder(path, strict=strict, entries=entries)
        builder._adopt(first)  # type: ignore[arg-type]
        builder._parse(progress)
    else:
        store.set_index(np.array(members, dtype=MEMBER_DTYPE))  # type: ignore[union-attr]
    return builder, builder.finish(), note


def load(
    path: str | Path,
    *,
    strict: bool = True,
    progress: Progress | None = None,
    sidecar: bool = True,
    entries: EntriesWanted = False,
) -> Trace:
    """Load a whole trace file. See the module docstring for the error contract.

    With `sidecar` (tracer.trace.sidecar), a big trace's columns are saved after the
    first load and mapped back on the next, instead of parsing the file again. With
    `entries`, the per-request entry columns (Trace.entries) are collected by the same
    parse, or mapped from a sidecar that holds them (one that does is mapped anyway; see
    EntriesWanted for one that does not)."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:
            trace = _load_open(path, f, strict, progress, sidecar, entries)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except (OSError, EOFError) as exc:
        raise TraceError(path, f"cannot read: {exc}") from None
    if trace.footer is None:
        trace.footer = kept_footer(path, trace)
    return trace


def kept_footer(path: Path, trace: Trace) -> dict[str, Any] | None:
    """The footer's facts the recorder kept beside the trace (`<trace>.end`), when the server
    was killed before it wrote the footer: taken only once no process holds the file's lock
    (the recorder holds it while it records), if they count exactly the steps read and belong
    to this recording (ended after it started). Marked `kept`."""
    try:
        fd = os.open(path.with_name(path.name + schema.KEPT_FOOTER_SUFFIX), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # fails while the recorder lives
        kept = orjson.loads(os.pread(fd, 2 * schema.KEPT_FOOTER_BYTES, 0))
    except (OSError, orjson.JSONDecodeError):
        return None
    finally:
        os.close(fd)
    if not isinstance(kept, dict) or kept.get("kind") != schema.FOOTER:
        return None
    if kept.get("steps_written") != len(trace):
        return None
    end, start = kept.get("end_time"), trace.header.get("start_time")
    if isinstance(end, int | float) and isinstance(start, int | float) and end < start:
        return None
    return {**with_defaults(kept, schema.FOOTER_DEFAULTS), "kept": True}


def _load_open(
    path: Path,
    f: IO[bytes],
    strict: bool,
    progress: Progress | None,
    use_sidecar: bool,
    wanted: EntriesWanted,
) -> Trace:
    entries, insist = bool(wanted), wanted is True  # collect them in a parse; and from a sidecar
    fd = f.fileno()
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a pipe: no offsets to read back, so into memory
        raw = f.read()
        data, note = codec.decode(path, raw)
        builder = TraceBuilder(path, strict=strict, entries=entries)
        builder._adopt(data)
        builder._parse(progress)
        return _built(path, builder, builder.finish(), note, len(data), progress)
    kind = codec.kind_of(os.pread(fd, codec.HEAD, 0))
    if kind == "zstd":
        data, note = codec.decode(path, f.read())
        builder = TraceBuilder(path, strict=strict, entries=entries)
        builder._adopt(data)
        builder._parse(progress)
        return _built(path, builder, builder.finish(), note, len(builder._buf), progress)
    use_sidecar = use_sidecar and st.st_size >= sidecar.MIN_SOURCE_BYTES
    resumed = None
    if use_sidecar:
        fingerprint = sidecar.fingerprint(fd, st)
        trace, resumed = from_sidecar(path, fd, st, strict, kind, progress, wanted)
        if trace is not None:
            trace.fingerprint = fingerprint
            return trace
    if kind == "gzip":
        builder, torn, note = _parse_gzip(path, fd, st, strict, progress, entries)
    else:
        if resumed is None:  # the store keeps its own fd: the Trace reads this file even if it is replaced
            resumed = TraceBuilder(
                path, strict=strict, store=FileStore(path, file_identity(st), fd=os.dup(fd)), entries=entries
            )
        builder, torn, note = _parse_plain(resumed, fd, st.st_size, progress)
    trace = _built(path, builder, torn, note, st.st_size, progress)
    if insist and trace.entries is None:
        entries_of(trace)  # a sidecar without them, for a file that grew since
    if use_sidecar and builder.store is not None:
        write_sidecar(path, builder, torn, fingerprint, kind, trace)
        trace.fingerprint = fingerprint
    return trace


def reopen(path: str | Path, *, strict: bool = True) -> Trace | None:
    """The trace from a sidecar that matches the file, without parsing it; None when there
    is none to trust (the caller then parses, as `load` does)."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size < sidecar.MIN_SOURCE_BYTES:
                return None
            kind = codec.kind_of(os.pread(fd, codec.HEAD, 0))
            if kind == "zstd":
                return None
            trace = from_sidecar(path, fd, st, strict, kind, None)[0]
            if trace is not None:
                trace.fingerprint = sidecar.fingerprint(fd, st)
            return trace
    except OSError:
        return None


def _built(
    path: Path,
    builder: TraceBuilder,
    torn: Torn | None,
    note: str | None,
    total: int,
    progress: Progress | None,
) -> Trace:
    if progress is not None:
        progress(total, total)
    if builder.header is None:
        what = "empty file" if total == 0 else (torn.describe() if torn else "no records")
        raise TraceHeaderError(path, f"no complete header record ({note or what})")
    if torn is None and note is not None:
        builder.problems.append(TraceError(path, note))
    return builder.build(torn)
