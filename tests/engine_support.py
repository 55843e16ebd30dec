"""Traces of one data-parallel run, made from a sample trace: each engine's copy with its own pid."""

from __future__ import annotations

from pathlib import Path

import orjson


def engine_copy(src: Path, out: Path, *, steps: int | None = None, **header: object) -> Path:
    """`src` as another engine of the same server would write it (its own pid, given in
    `header`), with `config` entries merged into its config, and only its first `steps` steps."""
    first, *rest = src.read_bytes().splitlines(keepends=True)
    doc = orjson.loads(first)
    config = header.pop("config", None)
    doc.update(header)
    if config:
        doc["config"] = {**doc["config"], **config}  # type: ignore[dict-item]
    out.write_bytes(orjson.dumps(doc) + b"\n" + b"".join(rest[:steps] if steps is not None else rest))
    return out
