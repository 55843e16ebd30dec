"""Starts and ends the recording index's process for a trace the recorder writes.

The index is built beside the server (tracer.trace.index_follower), not on the writer
thread: what it costs (parsing and packing every record again) then never runs under the
server's GIL. Starting it is the server's only cost; if it cannot start, the trace is
written as ever, without an index, and its first open parses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import tracer
from tracer.trace.index_files import RECORDING_INDEX_INTERVAL_S, recording_index_wanted

logger = logging.getLogger("schedscope.writer")


class IndexProcess:
    """The follower of one trace file; `close` once the writer closed the file."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @classmethod
    def start(
        cls, path: str | Path | None, *, interval_s: float = RECORDING_INDEX_INTERVAL_S
    ) -> IndexProcess | None:
        """Follow `path` (already created by the writer), or None where no index is wanted
        (`recording_index_wanted`) or the process could not start."""
        if not recording_index_wanted(path):
            return None
        assert path is not None
        # The package's own location first: the server may have found it some other way.
        root = str(Path(tracer.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tracer.trace.index_follower",
                    str(path),
                    "--interval",
                    str(interval_s),
                ],
                stdin=subprocess.PIPE,  # closed by `close` or by the parent's end: the follower's cue
                stdout=subprocess.DEVNULL,
                env=env,
                close_fds=True,
                start_new_session=True,  # a Ctrl-C to the server lets it finish its last segment
            )
        except OSError as exc:
            logger.warning(
                "schedscope: no recording index for %s (%s); the trace itself is unaffected", path, exc
            )
            return None
        return cls(proc)

    def close(self, timeout: float) -> None:
        """The trace is closed: let the follower read to its end and write its last segment,
        waiting up to `timeout` (it finishes on its own after that)."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.info(
                "schedscope: the trace's recording index is still being written (pid %d)", self.proc.pid
            )
