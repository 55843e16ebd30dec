"""Load a trace from bytes already in memory (an upload), with size limits.

The same parsing and validation as `tracer.trace.reader.load` (TraceBuilder), without
a file path: nothing is written to disk and no caller-chosen path is opened.
gzip and zstd are recognised by their magic bytes (tracer.trace.codec); the decompressed
size is bounded so a small upload cannot expand into gigabytes.
"""

from __future__ import annotations

from tracer.trace.builder import TraceBuilder
from tracer.trace.codec import decode_bounded
from tracer.trace.errors import TraceError
from tracer.trace.trace_type import Trace


def load_bytes(data: bytes, name: str, *, strict: bool = True, max_decompressed: int = 1 << 30) -> Trace:
    """Parse a whole trace held in `data`; `name` only labels it in messages.

    Raises TraceError (with line and field) on content that is not a trace.
    """
    data = decode_bounded(data, name, max_decompressed)
    if not data.strip():
        raise TraceError(name, "empty file")
    builder = TraceBuilder(name, strict=strict)
    builder.feed(data)
    torn = builder.finish()
    if builder.header is None:
        what = torn.describe() if torn else "no records"
        raise TraceError(name, f"no complete header record ({what})")
    return builder.build(torn)
