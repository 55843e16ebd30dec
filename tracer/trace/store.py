"""Where a loaded trace's step records live, so `Trace.step(i)` can parse one on demand.

- `MemoryStore`: the bytes in memory (live streams, uploads, single-member `.gz`, `.zst`).
- `FileStore`: a plain file, read in place with `os.pread`; nothing of it is held.
- `GzipMemberStore`: a gzip file written in independent members (the recorder's
  `.gz`), with an index of members; only the member holding a step is decompressed,
  and a few recently used members are kept.

A span is a record's [start, end) in the trace's uncompressed bytes. Reads are safe
from several threads (the TUI loads in one and inspects in another; Dash serves from many).
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tracer.trace.errors import TraceError

# read_many() joins neighbouring spans into one read while the block stays this small.
_BLOCK = 4 << 20
# Fields of a gzip member index row.
MEMBER_DTYPE = np.dtype([("coff", "<i8"), ("clen", "<i8"), ("ustart", "<i8"), ("ulen", "<i8")])


class Store:
    """Bytes of a trace by uncompressed offset."""

    path: str

    def read(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    @property
    def held(self) -> int:
        """Bytes of the trace this store keeps in memory."""
        return 0

    def read_many(self, spans: np.ndarray) -> Iterator[bytes]:
        """Each span's bytes, in the order given; neighbouring spans in increasing order
        are read in one go (a scan over every step costs a read per block, not per step)."""
        n, i = len(spans), 0
        starts, ends = spans[:, 0].tolist(), spans[:, 1].tolist()
        while i < n:
            lo, hi, j = starts[i], ends[i], i + 1
            while j < n and starts[j] >= hi and ends[j] - lo <= _BLOCK:
                hi, j = ends[j], j + 1
            if j == i + 1:
                yield self.read(lo, hi)
            else:
                block = self.read(lo, hi)
                for k in range(i, j):
                    yield block[starts[k] - lo : ends[k] - lo]
            i = j

    def close(self) -> None:
        """Release an open file, if any (it is opened again when next read)."""


class MemoryStore(Store):
    def __init__(self, data: bytes | bytearray, path: str | Path = "<memory>") -> None:
        self.path = str(path)
        # A builder's bytearray may keep growing after a Trace took this store: spans
        # only ever point into what was there when it was built.
        self.data = data

    def read(self, start: int, end: int) -> bytes:
        return bytes(self.data[start:end])

    def read_many(self, spans: np.ndarray) -> Iterator[bytes]:
        data = self.data
        for start, end in spans.tolist():
            yield bytes(data[start:end])

    @property
    def held(self) -> int:
        return len(self.data)


def file_identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


class _LazyFile:
    """A read-only fd: the loader's own (so a loaded Trace keeps reading the file it parsed
    even if that is deleted or replaced, as when its bytes were in memory), or opened on
    first use (a follower's builder, an unpickled copy) and then checked to be the file
    the trace was read from. Pickles without the fd."""

    def __init__(self, path: str, identity: tuple[int, int] | None, fd: int | None = None) -> None:
        self.path = path
        self.identity = identity
        self._fd = fd
        self._lock = threading.Lock()

    def fd(self) -> int:
        fd = self._fd
        if fd is not None:
            return fd
        with self._lock:
            if self._fd is None:
                try:
                    fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except OSError as exc:
                    raise TraceError(self.path, f"cannot read step detail: {exc.strerror or exc}") from None
                ident = file_identity(os.fstat(fd))
                if self.identity is None:
                    self.identity = ident
                elif ident != self.identity:
                    os.close(fd)
                    raise TraceError(self.path, "was replaced since it was loaded; load it again")
                self._fd = fd
            return self._fd

    def pread(self, n: int, offset: int) -> bytes:
        try:
            return os.pread(self.fd(), n, offset)
        except OSError as exc:
            raise TraceError(self.path, f"cannot read step detail: {exc.strerror or exc}") from None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # os.close bound at definition: at interpreter exit the module's globals may be gone.
        fd, self._fd = self._fd, None
        if fd is not None:
            _close(fd)

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "identity": self.identity}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["path"], state["identity"])  # type: ignore[misc, arg-type]


class FileStore(Store):
    """A plain trace file read in place. `fd`, if given, is an open fd of it that the
    store takes over; else one is opened on first read and `identity` (st_dev, st_ino)
    pins it to the file that was parsed, so a replaced file is reported, not misread."""

    def __init__(
        self, path: str | Path, identity: tuple[int, int] | None = None, *, fd: int | None = None
    ) -> None:
        self.path = str(path)
        if identity is None:
            try:
                identity = file_identity(os.fstat(fd) if fd is not None else os.stat(self.path))
            except OSError:
                identity = None  # not there yet (a follower waiting for it): pinned at first read
        self._file = _LazyFile(self.path, identity, fd)

    @property
    def identity(self) -> tuple[int, int] | None:
        return self._file.identity

    def read(self, start: int, end: int) -> bytes:
        data = self._file.pread(end - start, start)
        if len(data) != end - start:
            raise TraceError(
                self.path,
                f"ends before byte {end} (a step recorded there when it was loaded): "
                "the file was truncated or rewritten; load it again",
            )
        return data

    def close(self) -> None:
        self._file.close()


class GzipMemberStore(Store):
    """A multi-member gzip file: `members` rows are (compressed offset, compressed length,
    uncompressed start, uncompressed length), in file order."""

    def __init__(
        self,
        path: str | Path,
        members: np.ndarray,
        identity: tuple[int, int] | None = None,
        *,
        fd: int | None = None,
        cache: int = 4,
    ) -> None:
        self.path = str(path)
        self.set_index(members)
        self._file = _LazyFile(self.path, identity, fd)
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_size = cache
        self._lock = threading.Lock()

    def set_index(self, members: np.ndarray) -> None:
        """The member index (the loader learns it member by member, while parsing)."""
        self.members = np.asarray(members, dtype=MEMBER_DTYPE)
        self._ustart = self.members["ustart"]

    @property
    def held(self) -> int:
        return sum(map(len, self._cache.values()))

    def _member(self, k: int) -> bytes:
        with self._lock:
            data = self._cache.get(k)
            if data is not None:
                self._cache.move_to_end(k)
                return data
        coff, clen, _, ulen = (int(v) for v in self.members[k].tolist())
        raw = self._file.pread(clen, coff)
        if len(raw) != clen:
            raise TraceError(
                self.path,
                f"gzip member {k} (compressed bytes {coff}..{coff + clen}) runs past the end of the "
                f"file ({coff + len(raw)}): the file was truncated or rewritten; load it again",
                field="member",
            )
        data = inflate_member(raw, ulen)
        if len(data) < ulen:
            raise TraceError(
                self.path,
                f"gzip member {k} (compressed bytes {coff}..{coff + clen}) decompresses to "
                f"{len(data)} bytes, its index says {ulen}: the file changed; load it again",
                field="member",
            )
        data = data[:ulen]
        with self._lock:
            self._cache[k] = data
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return data

    def read(self, start: int, end: int) -> bytes:
        k = int(np.searchsorted(self._ustart, start, side="right")) - 1
        if k < 0 or end < start:
            raise TraceError(self.path, f"bytes {start}..{end} are in no gzip member", field="member")
        parts: list[bytes] = []
        pos = start
        while pos < end:  # a record cut across members (appended runs, a torn write): join them
            if k >= len(self.members):
                raise TraceError(self.path, f"bytes {pos}..{end} are past the last member", field="member")
            data = self._member(k)
            base = int(self._ustart[k])
            parts.append(data[pos - base : end - base])
            pos = base + len(data)
            k += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._file.close()


# Compressed bytes per decompress() call. The loader and inflate_member() both cut a
# member into these pieces from its first byte, so a member that is cut short or corrupt
# yields exactly the same bytes to both (the output of a failing call is lost in both).
PIECE = 256 << 10


def inflate_member(raw: bytes, limit: int | None = None) -> bytes:
    """One gzip member's output, as the loader indexed it: decompressed piece by piece,
    keeping what came before a cut or corrupt end."""
    d = zlib.decompressobj(wbits=31)
    out: list[bytes] = []
    size = 0
    for at in range(0, len(raw), PIECE):
        try:
            chunk = d.decompress(raw[at : at + PIECE])
        except zlib.error:
            return b"".join(out)
        out.append(chunk)
        size += len(chunk)
        if d.eof or (limit is not None and size >= limit):
            return b"".join(out)
    out.append(d.flush())
    return b"".join(out)
