"""The recording index of a trace being recorded, built in a process beside the server.

The recorder's writer thread only writes the trace; this process (started by
tracer.record.indexer) follows the file as it grows, as a viewer following it would, and
hands each complete record to a `RecordingIndex`. Parsing and packing a step costs a few
hundred microseconds at 256 running: here it runs on another core, at a lower priority,
and not under the server's GIL (docs/performance.md, P1).

It ends when its parent closes its stdin (the writer wrote the footer and closed the
trace) or is gone (a kill: the last segment then describes the complete records read).
A line the writer has not finished is not read until it is; a file that shrinks or a
record the index cannot take stops the index with one warning (`RecordingIndex.stop`), and
the trace itself is never touched.

    python -m tracer.trace.index_follower TRACE [--interval S]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import sys

import orjson

from tracer.trace import sidecar
from tracer.trace.recording_index import INTERVAL_S, RecordingIndex

POLL_S = 0.2  # how often an idle trace is looked at again
CHUNK = 1 << 20  # bytes read at a time: a segment (interval 0) covers at most this


def follow(
    path: str, *, interval_s: float = INTERVAL_S, stdin: int = 0, poll_s: float = POLL_S
) -> RecordingIndex:
    """Index `path` until `stdin` reads EOF or the parent is gone."""
    parent = os.getppid()
    fd = os.open(path, os.O_RDONLY)
    index = RecordingIndex(path, interval_s=interval_s, fd=fd)
    offset = 0  # bytes of the trace handed to the index
    pending = b""  # the start of a line not finished yet
    done = False
    try:
        # No index is written for a file this small: a short run costs no parsing at all,
        # and a long one catches up once it has passed that size.
        while not done and os.fstat(fd).st_size < sidecar.MIN_SOURCE_BYTES:
            done = _ended(stdin, parent, poll_s)
        if os.fstat(fd).st_size < sidecar.MIN_SOURCE_BYTES:
            return index
        while index.failed is None:
            chunk = os.pread(fd, CHUNK, offset + len(pending))
            if chunk:
                data = pending + chunk
                end = data.rfind(b"\n") + 1
                pending = data[end:]
                at = 0
                while at < end:
                    nl = data.index(b"\n", at) + 1
                    line = data[at:nl]
                    try:
                        value = orjson.loads(line)
                        kind = value.get("kind") if type(value) is dict else None
                    except orjson.JSONDecodeError:
                        kind = None
                    if type(kind) is not str:
                        index.stop(f"byte {offset}: not a trace record")
                        break
                    index.add(kind, value, line, offset)
                    offset += len(line)
                    at = nl
                if index.due():
                    index.checkpoint()
                if len(chunk) == CHUNK:
                    continue  # more is there already
            if done:
                break
            done = _ended(stdin, parent, poll_s)  # one more read after the end: what came before it
    finally:
        if index.failed is None:
            index.close()
        os.close(fd)
    return index


def _ended(stdin: int, parent: int, poll_s: float) -> bool:
    """Wait up to `poll_s`; True once the writer is done (stdin at EOF) or the parent gone."""
    ready, _, _ = select.select([stdin], [], [], poll_s)
    if ready and not os.read(stdin, 4096):
        return True
    return os.getppid() != parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tracer.trace.index_follower",
        description="Write the recording index (<trace>.ssidx) of a trace while it is recorded, "
        "until stdin closes or the parent process is gone. Started by the recorder.",
    )
    ap.add_argument("trace", help="the trace file the recorder writes (plain JSONL)")
    ap.add_argument(
        "--interval", type=float, default=INTERVAL_S, help="seconds between segments (default %(default)s)"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    with contextlib.suppress(OSError):
        os.nice(10)  # behind the server's own threads, whatever it runs on
    try:
        follow(args.trace, interval_s=args.interval)
    except Exception as exc:  # one line in the server's log, never a traceback
        logging.getLogger("schedscope.recording_index").warning(
            "schedscope: no more recording index for %s (%s: %s); the trace itself is unaffected",
            args.trace,
            type(exc).__name__,
            exc,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
