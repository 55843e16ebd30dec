"""Where a trace's index files live, and whether a trace being written gets a recording index.

Stdlib only: the recorder asks this inside EngineCore before it starts the recording index's
process, and must not load the reader, the sidecar container or NumPy to do so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

SUFFIX = ".ssidx"
ENV_SIDECAR = "SCHEDSCOPE_SIDECAR"  # "off": no sidecar is read or written, no recording index
RECORDING_INDEX_INTERVAL_S = 10.0  # a recording index writes a segment at most this often (and at the footer)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "schedscope"


def locations(source: Path, name: str = "") -> list[Path]:
    """Where a sidecar for `source` may be: next to it, then in the cache directory (none
    with SCHEDSCOPE_SIDECAR=off). `name`: a derived one's (`<trace>.<name>.ssidx`)."""
    if os.environ.get(ENV_SIDECAR, "").strip().lower() == "off":
        return []
    source = Path(os.path.abspath(source))
    key = hashlib.blake2b(os.fsencode(source), digest_size=12).hexdigest()
    suffix = f".{name}{SUFFIX}" if name else SUFFIX
    return [source.with_name(source.name + suffix), cache_dir() / f"{source.name}.{key}{suffix}"]


def recording_index_wanted(path: str | Path | None) -> bool:
    """Whether a trace written to `path` gets a recording index: not for no file, a gzip trace
    (its sidecar also needs the member index, which only a read makes) or
    SCHEDSCOPE_SIDECAR=off. When it does, an earlier run's index beside the same path is
    removed now (unlinked, not truncated: a reader may have it mapped)."""
    if path is None or Path(path).suffix in (".gz", ".zst") or not locations(Path(path)):
        return False
    for stale in locations(Path(path)):
        with contextlib.suppress(OSError):
            stale.unlink(missing_ok=True)
    return True
