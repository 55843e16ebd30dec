"""Two traces opened for a comparison (`schedscope diff`, and `tui`/`web` given A and B), each
on a core of its own.

A trace with a sidecar or a recording index (tracer.trace.sidecar) opens in a second or two,
mostly in NumPy, which lets go of the GIL: two threads share the cores. A trace without one
(an older trace, a first open) is parsed record by record, which holds the GIL, so two such
parses in two threads take turns on one core. Then B is opened in a child process
(`python -m tracer.opening.open_pair B`), as a first open of it would: parsed, its passes
computed (`compare.prepare`), its sidecars written (the reader's, the step pass's and the
request index's). Meanwhile this process parses A, then maps B's sidecars.

Where that cannot help, B is opened here as before: sidecars turned off
(`SCHEDSCOPE_SIDECAR=off`) or too small a file to get one (`sidecar.MIN_SOURCE_BYTES`), a
pipe or a zstd file, or a child that failed or wrote no sidecar (a bad trace's error then
comes from this process's own load, named as ever).
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tracer.analysis.compare import prepare
from tracer.analysis.session import Session
from tracer.trace import codec, index_files, sidecar
from tracer.trace.builder import Progress
from tracer.trace.reader import load, reopen
from tracer.trace.trace_type import Trace, entries_of


def load_pair(
    path_a: str | Path,
    path_b: str | Path,
    *,
    strict: bool = True,
    progress: Progress | None = None,
    session: Callable[[Trace], Session] = Session,
) -> tuple[Session, Session]:
    """Sessions over A and B, their entry columns collected (`load(..., entries=True)`);
    `session` makes each (a viewer's Session class). Opened through tracer.opening.door."""
    with ThreadPoolExecutor(2, thread_name_prefix="schedscope-load") as pool:
        # Each from its index when it has one (mostly NumPy: both at once).
        a, b = pool.map(lambda p: _reopened(p, strict, session), (path_a, path_b))
    if a is not None and b is not None:
        return a, b
    child = _child(path_b, strict) if a is None and b is None else None
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="schedscope-load") as pool:
            # A parse holds the GIL, a reopen mostly does not: one of each at once.
            fa = pool.submit(_opened, path_a, a, strict, progress, session)
            fb = None if child is not None else pool.submit(_opened, path_b, b, strict, None, session)
            a = fa.result()
            if child is not None:
                prepare(a)  # A's passes while the child does B's
                child.wait()
                b = _opened(path_b, None, strict, None, session)
            else:
                assert fb is not None
                b = fb.result()
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
    return a, b


def _reopened(path: str | Path, strict: bool, make: Callable[[Trace], Session]) -> Session | None:
    trace = reopen(path, strict=strict)
    if trace is None:
        return None
    if trace.entries is None:
        entries_of(trace)
    return make(trace)


def _opened(
    path: str | Path,
    session: Session | None,
    strict: bool,
    progress: Progress | None,
    make: Callable[[Trace], Session],
) -> Session:
    if session is not None:
        return session
    return make(load(path, strict=strict, progress=progress, entries=True))


def _child(path: str | Path, strict: bool) -> subprocess.Popen[bytes] | None:
    """A child process opening `path` as a first open does, when its sidecars can hand it over."""
    if not index_files.locations(Path(path)):  # sidecars off: nothing to hand over
        return None
    try:
        with open(path, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            head = os.pread(f.fileno(), codec.HEAD, 0)
    except OSError:
        return None  # this process's own load names the problem
    if not stat.S_ISREG(st.st_mode) or st.st_size < sidecar.MIN_SOURCE_BYTES or codec.kind_of(head) == "zstd":
        return None
    args = [
        sys.executable,
        "-m",
        "tracer.opening.open_pair",
        os.fspath(path),
        *([] if strict else ["--lenient"]),
    ]
    try:
        # Quiet: what it would say (a problem, an error) this process says when it opens B.
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tracer.opening.open_pair",
        description="Open one trace as `schedscope diff` opens its B in a child process: parse it, "
        "compute its passes and leave its sidecars for the parent to map.",
    )
    p.add_argument("trace", type=Path)
    p.add_argument("--lenient", action="store_true")
    args = p.parse_args(argv)
    prepare(Session(load(args.trace, strict=not args.lenient, entries=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
