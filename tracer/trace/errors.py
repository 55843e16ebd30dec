"""The reader's error types, shared by the reader, the step stores and the sidecar."""

from __future__ import annotations

from pathlib import Path


class TraceError(Exception):
    """A trace that cannot be read as it stands; says where and which field."""

    def __init__(self, path: str | Path, message: str, *, line: int | None = None, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


def skippable(error: TraceError) -> bool:
    """Whether `--lenient` would load past this error: a malformed line can be skipped; a
    missing file, a bad header or a newer schema cannot."""
    return error.line is not None and not isinstance(error, TraceHeaderError)


class TraceOrderError(TraceError):
    """A step record out of order: its number does not exceed the step before it, or it
    comes after the footer. `step` is its number; `after` the step it follows (None when
    it follows the footer). A file two writers appended to, or a copy tool joined."""

    def __init__(self, path: str | Path, message: str, *, line: int, step: int, after: int | None):
        super().__init__(path, message, line=line, field="step")
        self.step = step
        self.after = after


class TraceHeaderError(TraceError):
    """No usable header record: nothing in the file can be read, strict or not."""


class TraceVersionError(TraceHeaderError):
    """The trace's schema major version is newer than this reader understands."""
