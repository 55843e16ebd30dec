"""A columnar sidecar (`<trace>.ssidx`): what a full load computed, so re-opening a big
trace maps arrays instead of parsing gigabytes of JSON.

One file: MAGIC, a little-endian u64 length, a JSON meta object, then raw NumPy
arrays, each starting at a 64-byte boundary. The meta says where each array is
(`arrays`: name -> dtype, count, offset), the file's own length (`total`), and what
it was built from (`source`: size, mtime_ns and BLAKE2 hashes of the first and last
64 KiB). The reader adds its own keys (header, footer, problems, ...): this module
only knows the container and whether it still describes the source.

The sidecar lives next to the trace; where that directory is not writable, in the
cache directory ($XDG_CACHE_HOME/schedscope, else ~/.cache/schedscope), named after
the trace's absolute path. Writing one never fails a load (logged at debug level).
`SCHEDSCOPE_SIDECAR=off` neither reads nor writes one (a first open, measured as such);
`SCHEDSCOPE_SIDECAR_MIN_BYTES` sets the size below which a trace gets none (16 MiB).
A sidecar that is torn, of another version, for another or a changed file, or whose
arrays are not what the reader expects is never trusted: the caller parses again.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from tracer.trace.index_files import locations

if TYPE_CHECKING:
    from tracer.trace.trace_type import Trace

logger = logging.getLogger("schedscope.sidecar")

MAGIC = b"SSIDX\x00\r\n"  # the \r\n catches a text-mode copy
VERSION = 1
ENV_MIN_BYTES = "SCHEDSCOPE_SIDECAR_MIN_BYTES"


def _min_bytes(default: int = 16 << 20) -> int:
    try:
        return max(0, int(os.environ.get(ENV_MIN_BYTES, default)))
    except ValueError:
        logger.warning("schedscope: %s is not a number of bytes; using %d", ENV_MIN_BYTES, default)
        return default


# Below this a trace parses in well under a second: no sidecar is written or read for
# it, so small traces (tests, sample traces, replays) leave no files behind. The variable
# sets another size for a process and what it starts (a server's recording index included).
MIN_SOURCE_BYTES = _min_bytes()
_LEN = struct.Struct("<Q")
_ALIGN = 64
_HASHED = 64 << 10


class Torn(ValueError):
    """A sidecar (or its first segment) shorter than its own meta says: cut short."""


def _hash(fd: int, start: int, end: int) -> str:
    return hashlib.blake2b(os.pread(fd, end - start, start), digest_size=16).hexdigest()


def fingerprint(fd: int, st: os.stat_result, size: int | None = None) -> dict[str, Any]:
    """What a sidecar must match to stand for the file open on `fd` (as `st` saw it).
    `size`: for its first `size` bytes only, the file having grown since (matched as
    'grown' once it has; the mtime counts only when the sizes are equal)."""
    size = st.st_size if size is None else size
    return {
        "size": size,
        "mtime_ns": st.st_mtime_ns,
        "head": _hash(fd, 0, min(size, _HASHED)),
        "tail": _hash(fd, max(0, size - _HASHED), size),
    }


def _matches(fp: dict[str, Any], fd: int, st: os.stat_result) -> str | None:
    """'same' when the file is the one fingerprinted, 'grown' when it is that file with
    more appended, else None."""
    try:
        size, mtime, head, tail = int(fp["size"]), int(fp["mtime_ns"]), fp["head"], fp["tail"]
    except (KeyError, TypeError, ValueError):
        return None
    if st.st_size < size or _hash(fd, 0, min(size, _HASHED)) != head:
        return None
    if _hash(fd, max(0, size - _HASHED), size) != tail:
        return None
    if st.st_size == size:
        return "same" if st.st_mtime_ns == mtime else None
    return "grown"


def _pack(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[bytes, list[np.ndarray], int]:
    """One container: its head (magic, length, padded meta), its arrays (each to be padded to
    _ALIGN) and its total length."""
    layout: dict[str, Any] = {}
    offset = 0
    blobs = []
    for key, array in arrays.items():
        array = np.ascontiguousarray(array)
        layout[key] = {"dtype": str(array.dtype.descr), "count": len(array), "offset": offset}
        blobs.append(array)
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    body = {**meta, "version": VERSION, "arrays": layout}
    # The data offset depends on the meta's length and the meta holds the total length:
    # pad the meta to a fixed boundary so both are known at once.
    raw = orjson.dumps({**body, "total": 0, "data": 0})
    head = -(-(len(MAGIC) + _LEN.size + len(raw) + 32) // _ALIGN) * _ALIGN
    meta_bytes = orjson.dumps({**body, "total": head + offset, "data": head})
    meta_bytes += b" " * (head - len(MAGIC) - _LEN.size - len(meta_bytes))
    return MAGIC + _LEN.pack(len(meta_bytes)) + meta_bytes, blobs, head + offset


def _write_container(f: Any, head: bytes, blobs: list[np.ndarray]) -> None:
    f.write(head)
    for array in blobs:
        f.write(array.tobytes())
        f.write(b"\0" * (-array.nbytes % _ALIGN))


def write(source: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], name: str = "") -> Path | None:
    """Write the sidecar next to `source`, else in the cache directory; None if neither
    could be written (never raises for that)."""
    head, blobs, _ = _pack(meta, arrays)
    for target in locations(source, name):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                with open(tmp, "wb") as f:
                    _write_container(f, head, blobs)
                os.replace(tmp, target)
            finally:
                if tmp.exists():
                    tmp.unlink()
        except OSError as exc:
            logger.debug("schedscope: no sidecar at %s (%s)", target, exc)
            continue
        return target
    return None


def append_segment(target: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> int:
    """Append one segment (a container whose meta has `segment`) to the sidecar `target`, as
    the recording index does while a trace is recorded; its length. Raises OSError. A reader uses
    every whole segment in order and the meta of the last (`read(..., pieces=True)`); a
    segment cut short (a kill, a full disk) ends the sidecar there."""
    head, blobs, total = _pack(meta, arrays)
    with open(target, "ab") as f:
        if f.tell() % _ALIGN:
            raise OSError(f"{target} does not end on a segment boundary")
        _write_container(f, head, blobs)
    return total


def read(
    source: Path, fd: int, st: os.stat_result, dtypes: dict[str, np.dtype], *, pieces: bool = False
) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """(meta, arrays, 'same' or 'grown') from the first sidecar for `source` that is whole
    and describes it (the file open on `fd`, as `st` saw it), else None. With `pieces`, a
    segmented sidecar's arrays come as a list of one array per segment (the meta is the
    last whole segment's); without, only a sidecar of one container is read."""
    for where in locations(source):
        try:
            segments = _read_segments(where, dtypes) if pieces else [_read_one(where, dtypes)]
        except FileNotFoundError:
            continue
        except Torn as exc:  # a kill or a full disk while it was written: said once, then rebuilt
            logger.warning(
                "schedscope: %s is cut short (%s): not used; the trace is read instead", where, exc
            )
            continue
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            logger.debug("schedscope: sidecar %s not used (%s)", where, exc)
            continue
        meta = segments[-1][0]
        status = _matches(meta.get("source"), fd, st)
        if status is None:
            # A recording index (tracer.trace.recording_index) the trace no longer matches: the trace was
            # changed after it was recorded. Said once: the load that follows rewrites it.
            log = logger.warning if meta.get("born") else logger.debug
            log(
                "schedscope: %s no longer describes %s (changed since): not used; the trace is read instead",
                where,
                source,
            )
            continue
        if not pieces:
            return meta, segments[0][1], status
        names = set(segments[0][1]).intersection(*(set(a) for _, a in segments[1:]))
        return meta, {name: [a[name] for _, a in segments] for name in names}, status
    return None


def _map(where: Path) -> mmap.mmap:
    # Mapped, not read: a load touches only the arrays it uses (the reader's rows, not the
    # per-request entry columns a summary never needs). Sidecars are only ever replaced
    # (written to a temporary name, then renamed) or appended to, never rewritten in
    # place, so the mapping stays the file it was.
    with open(where, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ValueError("an empty file")
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _read_one(where: Path, dtypes: dict[str, np.dtype]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    data = _map(where)
    meta, arrays = _container(data, 0, dtypes)
    if meta.get("total") != len(data):
        raise Torn(f"{len(data)} bytes, its meta says {meta.get('total')}")
    return meta, arrays


def _read_segments(
    where: Path, dtypes: dict[str, np.dtype]
) -> list[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Every whole container of `where`, in order: one for a sidecar the reader wrote; one
    per segment for a recording index. A cut-short segment ends the list, with one warning."""
    data = _map(where)
    segments = [_container(data, 0, dtypes)]
    at = segments[0][0]["total"]
    if segments[0][0].get("segment") is None:
        if at != len(data):
            raise Torn(f"{len(data)} bytes, its meta says {at}")
        return segments
    while at < len(data):
        try:
            meta, arrays = _container(data, at, dtypes)
            if meta.get("segment") != len(segments):
                raise ValueError(f"segment {meta.get('segment')!r} where {len(segments)} was due")
        except (ValueError, KeyError, TypeError, struct.error, orjson.JSONDecodeError) as exc:
            logger.warning(
                "schedscope: %s is cut short after segment %d (%s): the trace is read from there on",
                where,
                len(segments) - 1,
                exc,
            )
            break
        segments.append((meta, arrays))
        at += meta["total"]
    return segments


def _container(
    data: mmap.mmap, at: int, dtypes: dict[str, np.dtype]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The container starting at byte `at` of `data`; ValueError when it is not whole."""
    if data[at : at + len(MAGIC)] != MAGIC:
        raise ValueError("not a schedscope sidecar (magic)")
    if at + len(MAGIC) + _LEN.size > len(data):
        raise Torn("cut short in its head")
    (n,) = _LEN.unpack_from(data, at + len(MAGIC))
    meta = orjson.loads(data[at + len(MAGIC) + _LEN.size : at + len(MAGIC) + _LEN.size + n])
    if not isinstance(meta, dict) or meta.get("version") != VERSION:
        raise ValueError(f"version {meta.get('version') if isinstance(meta, dict) else '?'}, not {VERSION}")
    total = meta.get("total")
    if type(total) is not int or total <= 0 or total % _ALIGN or at + total > len(data):
        raise Torn(f"{len(data) - at} bytes left, its meta says {total}")
    start = at + int(meta["data"])
    arrays = {}
    for name, dtype in dtypes.items():
        spec = meta["arrays"].get(name)
        if spec is None:
            continue  # optional (the gzip member index): the caller checks what it needs
        if spec["dtype"] != str(dtype.descr):
            raise ValueError(f"array {name!r} is {spec['dtype']}, this reader expects {dtype.descr}")
        offset, count = start + int(spec["offset"]), int(spec["count"])
        if count < 0 or offset % _ALIGN or offset + count * dtype.itemsize > at + total:
            raise ValueError(f"array {name!r} lies outside the file")
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return meta, arrays


# -- derived sidecars: what an analysis computed from a whole trace --------------------
#
# They carry the fingerprint of the file state the analysed Trace was loaded from (the one
# its reader sidecar matched or was written with), and are used only for a Trace loaded
# from that same state: the file is not read again to check them.


def write_derived(
    source: str | Path,
    name: str,
    fingerprint: dict[str, Any] | None,
    arrays: dict[str, np.ndarray],
    *,
    version: int,
    steps: int,
    meta: dict[str, Any] | None = None,
) -> Path | None:
    """Keep `arrays` (computed from all `steps` steps of the trace loaded from the file state
    `fingerprint`) as derived sidecar `name`, of that result's `version`; nothing without a
    fingerprint (a part of a trace, a stream, a small file)."""
    if fingerprint is None:
        return None
    doc = {**(meta or {}), "source": fingerprint, "derived_version": version, "steps": steps}
    return write(Path(source), doc, arrays, name)


def read_derived(
    source: str | Path,
    name: str,
    fingerprint: dict[str, Any] | None,
    dtypes: dict[str, np.dtype],
    *,
    version: int,
    steps: int,
) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """(meta, arrays) of the first whole derived sidecar `name` made for this fingerprint, of
    this version and number of steps, holding exactly the arrays `dtypes` names; else None."""
    if fingerprint is None:
        return None
    for where in locations(Path(source), name):
        try:
            meta, arrays = _read_one(where, dtypes)
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            logger.debug("schedscope: sidecar %s not used (%s)", where, exc)
            continue
        if (
            meta.get("source") == fingerprint
            and meta.get("derived_version") == version
            and meta.get("steps") == steps
            and set(arrays) == set(dtypes)
        ):
            return meta, arrays
    return None


def keep_derived(
    trace: Trace,
    name: str,
    arrays: dict[str, np.ndarray],
    *,
    version: int,
    meta: dict[str, Any] | None = None,
) -> Path | None:
    """`write_derived` for a result computed from all of `trace`: its file, fingerprint and steps."""
    return write_derived(
        trace.path, name, trace.fingerprint, arrays, version=version, steps=len(trace), meta=meta
    )


def derived_of(
    trace: Trace, name: str, dtypes: dict[str, np.dtype], *, version: int
) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """`read_derived` for `trace`: a result kept for its file state and number of steps."""
    return read_derived(trace.path, name, trace.fingerprint, dtypes, version=version, steps=len(trace))
