"""What a trace file's bytes are compressed with, and their decompression: one place for
the reader (`load`), the source (files read progressively and followed) and uploads (ingest).

Plain, gzip and zstd are told apart by their first bytes, never by the file name: a zstd
trace saved as `run.jsonl` opens as one named `run.jsonl.zst` does. gzip may hold several
members (the recorder and appended writes make them) and zstd several frames; both are
read to the end. zstd needs the optional `zstandard` package (`pip install schedscope[zstd]`).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from tracer.trace.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
HEAD = 4  # bytes enough to tell the kinds apart
Kind = Literal["plain", "gzip", "zstd"]
_ZSTD_PIECE = 4096  # compressed bytes per call when bounded: zstd can expand a piece ~32000x


def kind_of(head: bytes) -> Kind:
    """The compression of bytes that start with `head` (at least HEAD bytes of them, or all)."""
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    if head[:4] == ZSTD_MAGIC:
        return "zstd"
    return "plain"


def _zstandard(name: str | Path) -> ModuleType:
    try:
        import zstandard  # optional: only if installed
    except ImportError:
        raise TraceError(name, "reading zstd needs the 'zstandard' package (schedscope[zstd])") from None
    return zstandard


class Decoder:
    """A file's bytes as read, to trace bytes: plain passes through; gzip (any number of
    members) and zstd (any number of frames) decompress as they come, so a compressed file
    loads and follows like a plain one. Lenient: corrupt or cut-short data keeps what
    decompressed and says why in `note` (finish())."""

    def __init__(self, path: str | Path, head: bytes) -> None:
        self.path = path
        self.kind: Kind = kind_of(head)
        self.note: str | None = None  # why decompressing stopped early
        self._z: Any = None
        if self.kind == "zstd":
            self._zmod = _zstandard(path)
            self._zstd = self._zmod.ZstdDecompressor()

    def feed(self, raw: bytes) -> bytes:
        if self.kind == "plain":
            return raw
        if self.note is not None and "corrupt" in self.note:
            return b""  # nothing after corrupt data can be trusted
        if self.kind == "zstd":
            return self._feed_zstd(raw)
        out = bytearray()
        while raw:
            if self._z is None:
                self._z = zlib.decompressobj(wbits=31)
            try:
                out += self._z.decompress(raw)
            except zlib.error as exc:
                self.note = f"gzip data corrupt ({exc}); kept what decompressed"
                break
            if not self._z.eof:
                break
            raw, self._z = self._z.unused_data, None  # the next member
        return bytes(out)

    def _feed_zstd(self, raw: bytes) -> bytes:
        out = bytearray()
        while raw:
            if self._z is None:
                self._z = self._zstd.decompressobj()
            try:
                out += self._z.decompress(raw)
            except self._zmod.ZstdError as exc:
                self.note = f"zstd data corrupt ({exc}); kept what decompressed"
                break
            if not self._z.eof:
                break
            # The next frame, if any: made when its bytes come, so an ended file is not "cut short".
            raw, self._z = self._z.unused_data, None
        return bytes(out)

    def finish(self) -> str | None:
        """At the end of a complete file: a note if the compressed data stopped mid-stream."""
        if self.note is None and self._z is not None and not self._z.eof:
            self.note = f"{self.kind} stream cut short; kept what decompressed"
        return self.note


def decode(path: str | Path, raw: bytes) -> tuple[bytes, str | None]:
    """All of `raw` decompressed (whatever its kind), and a note if it stopped early."""
    decoder = Decoder(path, raw[:HEAD])
    data = decoder.feed(raw)
    return data, decoder.finish()


def decode_bounded(data: bytes, name: str, limit: int) -> bytes:
    """Strictly (an upload): `data` decompressed, refusing corrupt or cut-short data and more
    than `limit` bytes of output, so a small upload cannot expand into gigabytes."""
    kind = kind_of(data[:HEAD])
    if kind == "gzip":
        return _gunzip(data, name, limit)
    if kind == "zstd":
        return _unzstd(data, name, limit)
    return data


def _too_big(name: str, limit: int) -> TraceError:
    return TraceError(name, f"decompresses to more than {limit:,} bytes (the limit)")


def _gunzip(data: bytes, name: str, limit: int) -> bytes:
    out: list[bytes] = []
    size = 0
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(data, limit - size + 1)
        except zlib.error as exc:
            raise TraceError(name, f"not a readable gzip file ({exc})") from None
        size += len(chunk)
        if size > limit or d.unconsumed_tail:
            raise _too_big(name, limit)
        out.append(chunk)
        if not d.eof:
            raise TraceError(name, "gzip stream cut short")
        data = d.unused_data  # appended writes make several gzip members
    return b"".join(out)


def _unzstd(data: bytes, name: str, limit: int) -> bytes:
    zstandard = _zstandard(name)
    out = bytearray()
    d = zstandard.ZstdDecompressor().decompressobj()
    view = memoryview(data)
    at, begun = 0, False  # begun: the current frame has bytes and has not ended
    while at < len(view):
        piece = view[at : at + _ZSTD_PIECE].tobytes()
        try:
            out += d.decompress(piece)
        except zstandard.ZstdError as exc:
            raise TraceError(name, f"not a readable zstd file ({exc})") from None
        if len(out) > limit:
            raise _too_big(name, limit)
        if d.eof:  # a frame ended inside this piece: the rest starts the next frame
            at += len(piece) - len(d.unused_data)
            d, begun = zstandard.ZstdDecompressor().decompressobj(), False
        else:
            at, begun = at + len(piece), True
    if begun:
        raise TraceError(name, "zstd stream cut short")
    return bytes(out)
