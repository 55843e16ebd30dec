"""Load a trace from bytes already in memory (an upload), with size limits.

The same parsing and validation as `tracer.trace.reader.load` (TraceBuilder), without
a file path: nothing is written to disk and no caller-chosen path is opened.
gzip is recognised by its magic bytes; its decompressed size is bounded so a
small upload cannot expand into gigabytes.
"""

from __future__ import annotations

import zlib

from tracer.trace.reader import Trace, TraceBuilder, TraceError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


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
            raise TraceError(name, f"decompresses to more than {limit:,} bytes (the limit)")
        out.append(chunk)
        if not d.eof:
            raise TraceError(name, "gzip stream cut short")
        data = d.unused_data  # appended writes make several gzip members
    return b"".join(out)


def load_bytes(data: bytes, name: str, *, strict: bool = True, max_decompressed: int = 1 << 30) -> Trace:
    """Parse a whole trace held in `data`; `name` only labels it in messages.

    Raises TraceError (with line and field) on content that is not a trace.
    """
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, name, max_decompressed)
    elif data[:4] == ZSTD_MAGIC:
        raise TraceError(name, "zstd uploads are not supported; upload it plain or gzip-compressed")
    if not data.strip():
        raise TraceError(name, "empty file")
    builder = TraceBuilder(name, strict=strict)
    builder.feed(data)
    torn = builder.finish()
    if builder.header is None:
        what = torn.describe() if torn else "no records"
        raise TraceError(name, f"no complete header record ({what})")
    return builder.build(torn)
