"""Per-request entry columns: every request a step names, as flat arrays.

The step pass (tracer.analysis.step_features) and the request index (tracer.analysis.requests)
need each step's requests: who was scheduled with how many tokens and drafts, what each
sampled, who waited, was preempted or finished. Parsing every record again for that costs
about 0.3 ms a step at 256 running; here the same facts are collected once, while the
reader parses the trace (TraceBuilder with `entries=True`) or while the recorder writes it
(tracer.trace.recording_index), into flat int32 arrays the analyses run NumPy over.

Per step row (`steps`): how many entries of each kind it has, how its `sampled` was written
(none, aligned with the scheduled order, or an `{id: n}` dict) and its `context_tokens`.
Per entry, in the step's order: `sched` (the `new`, `resumed` then `running` requests: id
code, tokens, drafts, the count it sampled as `Trace.step` reads it), `items` (a dict
`sampled`'s own entries: id code, count), `wait` (`waiting_demand` ids), `pre`
(`preempted`), `fin` (`finished`), `arr` and `arr_t` (the `["a", …]` inputs: id code and
`arrival_time`, NaN where it is not a number). Ids are codes into `ids`, numbered in the order the
collector met them.

A pass over them (tracer.analysis.entry_features) gets what it reads in one bundle,
`Entries.for_pass` (EntryColumns): the scheduled entries come in chunks of whole steps, read
as it asks for them: reading them, and handing their pages back, stays in the trace layer.

A record the columns cannot hold exactly (an id that is not a JSON scalar, a count that is
not a 32-bit integer, a `sampled` of another type) stops the collection: the entries of
that trace are then unavailable (`EntryCollector.failed` says why) and the analyses read
the records instead.
"""

from __future__ import annotations

import contextlib
import mmap
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

# steps: per step row; sched/items/wait/pre/fin: per entry.
STEP_COLS = ("k_new", "k_res", "k_run", "k_items", "k_wait", "k_pre", "k_fin", "s_kind", "k_arr")
SCHED_COLS = ("req", "tokens", "spec", "sampled")
BYTE_COLS = ("spec", "sampled")
ITEM_COLS = ("req", "n")
# How a step's `sampled` was written.
S_NONE, S_ALIGNED, S_DICT = 0, 1, 2
NO_CONTEXT = np.iinfo(np.int64).min  # a step without `context_tokens`
HAND_BACK_PIECES = 8  # pieces read between two hand-backs in take(): a recording index's piece is 10 s or so
HAND_BACK = 16  # chunks between two hand-backs of a pass's mapped pages (about 10 MB read)
TRIM = 64  # chunks between two of a pass's trims of the freed heap (release_memory: a trim walks it)

_ID = itemgetter(0)
_TOKENS = itemgetter(1)
_SPEC = itemgetter(2)
_GROUP = itemgetter("id", "tokens", "spec")


def _put(column: array, values: Any) -> None:
    """Append `values` (a list: in C, each checked to be a 32-bit integer)."""
    if type(values) is list:
        column.fromlist(values)
    else:
        column.extend(values)


_TOKENS_AT = len(STEP_COLS) + 1 + SCHED_COLS.index("tokens")  # in EntryCollector._every
_SPEC_AT = len(STEP_COLS) + 1 + SCHED_COLS.index("spec")


class EntryCollector:
    """Entry columns of steps added in order (`add`); `build()` hands them out as Entries."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}
        # The codes of requests not finished yet: the ids a step names are nearly all live, and
        # a few hundred entries stay in cache where every id met (half a million) does not.
        self.live: dict[Any, int] = {}
        self.ids: list[Any] = []
        self.steps = {name: array("i") for name in STEP_COLS}
        self.ctx = array("q")
        # Drafts and sampled counts are small (at most K + 1): one byte each, converted in C
        # by bytes() (a count above 255 stops the collection).
        self.sched = {name: array("B" if name in BYTE_COLS else "i") for name in SCHED_COLS}
        self.items = {name: array("i") for name in ITEM_COLS}
        self.wait, self.pre, self.fin = array("i"), array("i"), array("i")
        self.arr, self.arr_t = array("i"), array("d")
        self.failed: str | None = None
        self.count = 0  # steps added
        # Every array, for a failed step's rollback.
        self._every = (*self.steps.values(), self.ctx, *self.sched.values(), *self.items.values())
        self._every += (self.wait, self.pre, self.fin, self.arr, self.arr_t)

    def _code(self, ids: Iterable[Any]) -> list[int]:
        ids = ids if type(ids) is list else list(ids)
        got = list(map(self.live.get, ids))
        try:
            j = got.index(None)  # scans in C: a step names a few ids that are not live
        except ValueError:
            return got
        codes, known, live = self.codes, self.ids, self.live
        while True:  # met before (a finished request named again), or numbered in the order met
            rid = ids[j]
            c = codes.get(rid)
            if c is None:
                if rid is not None and type(rid) not in (str, int, float, bool):
                    raise TypeError(f"request id {rid!r} is not a JSON scalar")
                c = codes[rid] = len(known)
                known.append(rid)
            got[j] = live[rid] = c
            try:
                j = got.index(None, j + 1)
            except ValueError:
                return got

    def add(self, r: dict[str, Any]) -> None:
        """One step record, in either layout (1.2 arrays or 1.1 entries), raw or expanded.
        After a failure nothing more is collected."""
        if self.failed is not None:
            return
        steps, sched = self.steps, self.sched
        every = self._every
        marks = [len(a) for a in every]
        try:
            ids: list[Any] = []
            counts = []
            tokens_col, spec_col = sched["tokens"], sched["spec"]
            for key in ("new", "resumed", "running"):
                group = r.get(key) or ()
                if type(group) is dict:
                    gid, tokens, spec = _GROUP(group)
                    _put(tokens_col, tokens)
                else:
                    gid = list(map(_ID, group))
                    tokens_col.fromlist(list(map(_TOKENS, group)))
                    try:
                        spec = list(map(_SPEC, group))
                    except IndexError:  # 1.1 entries without drafts count none
                        spec = [e[2] if len(e) > 2 else 0 for e in group]
                spec_col.frombytes(bytes(spec))
                ids += gid
                counts.append(len(gid))
            n = len(ids)
            if len(tokens_col) != marks[_TOKENS_AT] + n or len(spec_col) != marks[_SPEC_AT] + n:
                raise ValueError("groups of unequal lengths")
            sched["req"].fromlist(self._code(ids))
            smp = r.get("sampled")
            n_items = 0
            if smp is None:
                kind = S_NONE
                sched["sampled"].frombytes(bytes(n))
            elif type(smp) is list:
                if len(smp) != n:
                    raise ValueError(f"{len(smp)} sampled counts for {n} scheduled requests")
                kind = S_ALIGNED
                sched["sampled"].frombytes(bytes(smp))
            elif type(smp) is dict:
                kind = S_DICT
                sched["sampled"].frombytes(bytes(list(map(smp.get, ids, repeat(0)))))
                self.items["req"].fromlist(self._code(smp))
                self.items["n"].fromlist(list(smp.values()))
                n_items = len(smp)
            else:
                raise ValueError(f"sampled is {type(smp).__name__}")
            wait = r.get("waiting_demand") or ()
            if wait:
                self.wait.fromlist(self._code(map(_ID, wait)))
            pre, fin = r.get("preempted") or (), r.get("finished") or ()
            if pre:
                self.pre.fromlist(self._code(pre))
            if fin:
                self.fin.fromlist(self._code(fin))
                for rid in fin:
                    self.live.pop(rid, None)
            arrivals = [e for e in r.get("inputs") or () if e[0] == "a"]
            if arrivals:
                self.arr.fromlist(self._code([e[1] for e in arrivals]))
                self.arr_t.fromlist([_time(e[5]) for e in arrivals])
            context = r.get("context_tokens")
            self.ctx.append(NO_CONTEXT if context is None else int(context))
            for name, value in zip(
                STEP_COLS, (*counts, n_items, len(wait), len(pre), len(fin), kind, len(arrivals)), strict=True
            ):
                steps[name].append(value)
        except (TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError) as exc:
            self.failed = f"step {r.get('step')!r}: {type(exc).__name__}: {exc}"
            for a, at in zip(every, marks, strict=True):
                del a[at:]
            return
        self.count += 1

    def extend(self, entries: Entries) -> None:
        """Continue after `entries` (a sidecar's, for a file that grew since)."""
        assert self.count == 0 and not self.ids
        self.ids = list(entries.ids)
        self.codes = {rid: i for i, rid in enumerate(self.ids)}
        for name in STEP_COLS:
            self.steps[name].frombytes(np.ascontiguousarray(entries.steps[name], "<i4").tobytes())
        self.ctx.frombytes(np.ascontiguousarray(entries.ctx, "<i8").tobytes())
        for name in SCHED_COLS:
            dtype = "u1" if name in BYTE_COLS else "<i4"
            self.sched[name].frombytes(np.ascontiguousarray(entries.sched[name], dtype).tobytes())
        for name in ITEM_COLS:
            self.items[name].frombytes(np.ascontiguousarray(entries.items[name], "<i4").tobytes())
        for mine, theirs in (
            (self.wait, entries.wait),
            (self.pre, entries.pre),
            (self.fin, entries.fin),
            (self.arr, entries.arr),
        ):
            mine.frombytes(np.ascontiguousarray(theirs, "<i4").tobytes())
        self.arr_t.frombytes(np.ascontiguousarray(entries.arr_t, "<f8").tobytes())
        self.count = len(entries)

    def build(self) -> Entries | None:
        """The columns so far (copied), or None after a failure."""
        if self.failed is not None:
            return None

        def a(values: array) -> np.ndarray:
            dtype = {"i": np.int32, "q": np.int64, "B": np.uint8, "d": np.float64}[values.typecode]
            return np.frombuffer(values, dtype=dtype).copy()

        return Entries(
            ids=list(self.ids),
            steps={name: a(v) for name, v in self.steps.items()},
            ctx=a(self.ctx),
            per_entry={
                **{f"sched_{name}": a(v) for name, v in self.sched.items()},
                **{f"items_{name}": a(v) for name, v in self.items.items()},
                "wait": a(self.wait),
                "pre": a(self.pre),
                "fin": a(self.fin),
                "arr": a(self.arr),
                "arr_t": a(self.arr_t),
            },
        )


@dataclass
class EntryChunk:
    """Rows [r0, r1) of a pass over the entries (whole steps): their scheduled entries, their
    `waiting_demand` ids and their dict `sampled` entries, each a span of its column."""

    r0: int
    r1: int
    req: np.ndarray
    tokens: np.ndarray
    spec: np.ndarray
    sampled: np.ndarray
    wait: np.ndarray
    items_req: np.ndarray
    items_n: np.ndarray


@dataclass
class EntryColumns:
    """What a pass over every entry of a trace needs (tracer.analysis.entry_features), handed
    over at once: the trace's own per-step columns, the per-step counts (int64), the few
    entries other than the scheduled ones (with the admitted and resumed requests' codes), and
    `chunks`, the scheduled entries in chunks of whole steps, in step order: views of the
    columns, a plain list, when they are in memory (or mapped whole); when they are a
    recording index's mapped pieces, read as the pass asks for them (only a chunk's entries
    are in memory at once) and the mapped pages read handed back every HAND_BACK chunks, so
    they never pile up in the RSS. The pass trims the freed heap every TRIM chunks."""

    columns: dict[str, np.ndarray]  # the Trace's (not copied)
    counts: dict[str, np.ndarray]  # STEP_COLS, int64
    ctx: np.ndarray  # `context_tokens`, NO_CONTEXT where a step has none
    ids: list[Any]  # request ids by code
    new_req: np.ndarray  # codes of each step's `new` entries, in order (int64)
    res_req: np.ndarray  # and of its `resumed` ones
    pre: np.ndarray
    fin: np.ndarray
    arr: np.ndarray
    arr_t: np.ndarray
    chunks: list[EntryChunk] | Iterator[EntryChunk]  # read once, by the one pass the bundle was made for


class Entries:
    """A trace's entry columns (see the module docstring). From a sidecar, each array may be
    in pieces (one per segment of a recording index, tracer.trace.recording_index), mapped from the file:
    the per-entry arrays and the ids are joined on first use, so a load that never uses
    them (a summary) never reads them."""

    def __init__(
        self,
        ids: list[Any] | list[np.ndarray],
        steps: dict[str, np.ndarray],
        ctx: np.ndarray,
        per_entry: dict[str, np.ndarray | list[np.ndarray]],
    ) -> None:
        self._ids: list[Any] | list[np.ndarray] = ids
        self._ids_joined = not ids or not isinstance(ids[0], np.ndarray)
        self.steps = steps
        self.ctx = ctx
        self._per_entry = per_entry  # "sched_req", …, "items_n", "wait", "pre", "fin"
        self._pieces: dict[str, list[np.ndarray]] = {}  # of the columns joined so far
        self._piece_ends: dict[str, np.ndarray] = {}  # where each piece of a column ends
        self.checked = False  # the request codes were found inside the id table

    def __len__(self) -> int:
        return len(self.ctx)

    @property
    def ids(self) -> list[Any]:
        if not self._ids_joined:
            joined: list[Any] = []
            for piece in self._ids:
                part = orjson.loads(piece.tobytes())  # type: ignore[union-attr]
                if type(part) is not list:
                    raise ValueError("the entry ids are not a JSON list")
                joined += part
            self._ids, self._ids_joined = joined, True
        return self._ids  # type: ignore[return-value]

    def column(self, name: str) -> np.ndarray:
        value = self._per_entry[name]
        if isinstance(value, list):
            self._pieces[name] = value
            empty = np.zeros(0, SIDECAR_DTYPES[f"e_{name}"])
            value = self._per_entry[name] = np.concatenate(value) if value else empty
        return value

    def span(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Entries [lo, hi) of a per-entry column, without joining a recording index's pieces (a
        pass that goes chunk by chunk keeps only its chunk in memory)."""
        value = self._per_entry[name]
        if not isinstance(value, list):
            return value[lo:hi]
        ends = self._ends(name, value)
        first = int(np.searchsorted(ends, lo, side="right"))
        parts, at = [], lo
        for i in range(first, len(value)):
            start = int(ends[i - 1]) if i else 0
            if start >= hi:
                break
            parts.append(value[i][at - start : min(hi, int(ends[i])) - start])
            at = int(ends[i])
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, SIDECAR_DTYPES[f"e_{name}"])

    def take(self, name: str, positions: np.ndarray) -> np.ndarray:
        """The entries at `positions` (ascending) of a per-entry column, without joining it.
        Positions spread over the whole column touch every page of it: the mapped pages are
        handed back every HAND_BACK_PIECES pieces, so they never all count in the RSS."""
        value = self._per_entry[name]
        if not isinstance(value, list):
            return value[positions]
        ends = self._ends(name, value)
        piece = np.searchsorted(ends, positions, side="right")
        out = np.empty(len(positions), SIDECAR_DTYPES[f"e_{name}"])
        starts = np.concatenate([[0], ends[:-1]])
        bounds = np.searchsorted(piece, np.arange(len(value) + 1))  # ascending: each piece's slice
        for i in range(len(value)):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            if hi > lo:
                out[lo:hi] = value[i][positions[lo:hi] - starts[i]]
            if i % HAND_BACK_PIECES == HAND_BACK_PIECES - 1:
                self.hand_back()
        return out

    def _ends(self, name: str, pieces: list[np.ndarray]) -> np.ndarray:
        ends = self._piece_ends.get(name)
        if ends is None:
            ends = self._piece_ends[name] = np.cumsum([len(p) for p in pieces], dtype=np.int64)
        return ends

    def release(self) -> None:
        """Drop the per-entry columns joined from a sidecar's pieces (hundreds of MB for a big
        trace): back to the mapped pieces, joined again if asked for. The mapped pages read
        for the join are handed back too (they stay in the page cache, not in this process)."""
        self._per_entry.update(self._pieces)
        self._pieces.clear()
        self.hand_back()

    def hand_back(self) -> None:
        """Hand the mapped pages read so far back to the page cache: a pass that reads the
        pieces chunk by chunk calls this now and then, so they never all count in its RSS."""
        maps = {
            id(m): m
            for value in self._per_entry.values()
            if isinstance(value, list)
            for p in value
            if isinstance(m := _mapping(p), mmap.mmap)
        }
        for m in maps.values():
            with contextlib.suppress(OSError, ValueError, AttributeError):
                m.madvise(mmap.MADV_DONTNEED)

    def _count(self, name: str) -> int:
        value = self._per_entry[name]
        return sum(map(len, value)) if isinstance(value, list) else len(value)

    @property
    def sched(self) -> dict[str, np.ndarray]:
        return {name: self.column(f"sched_{name}") for name in SCHED_COLS}

    @property
    def items(self) -> dict[str, np.ndarray]:
        return {name: self.column(f"items_{name}") for name in ITEM_COLS}

    @property
    def wait(self) -> np.ndarray:
        return self.column("wait")

    @property
    def pre(self) -> np.ndarray:
        return self.column("pre")

    @property
    def fin(self) -> np.ndarray:
        return self.column("fin")

    @property
    def arr(self) -> np.ndarray:
        return self.column("arr")

    @property
    def arr_t(self) -> np.ndarray:
        return self.column("arr_t")

    def for_pass(self, columns: dict[str, np.ndarray], chunk: int) -> EntryColumns:
        """What a pass over every entry needs, beside the trace's `columns`; its scheduled
        entries in chunks of whole steps, about `chunk` entries each (a step is never split).
        The columns joined for it are released: the pass keeps what it reads."""
        k = {name: v.astype(np.int64) for name, v in self.steps.items()}
        sched_end = np.cumsum(k["k_new"] + k["k_res"] + k["k_run"])
        sched_first = sched_end - (k["k_new"] + k["k_res"] + k["k_run"])
        n = len(self.ctx)
        new_rows = np.repeat(np.arange(n, dtype=np.int64), k["k_new"])
        res_rows = np.repeat(np.arange(n, dtype=np.int64), k["k_res"])
        # A step's scheduled entries are its `new`, then `resumed`, then `running` ones.
        new_at = sched_first[new_rows] + _place(k["k_new"])
        res_at = sched_first[res_rows] + k["k_new"][res_rows] + _place(k["k_res"])
        found = EntryColumns(
            columns=columns,
            counts=k,
            ctx=self.ctx,
            ids=self.ids,
            new_req=self.take("sched_req", new_at).astype(np.int64),
            res_req=self.take("sched_req", res_at).astype(np.int64),
            pre=self.pre,
            fin=self.fin,
            arr=self.arr,
            arr_t=self.arr_t,
            chunks=self._chunks(k, sched_first, sched_end, chunk),
        )
        self.release()
        return found

    def _chunks(
        self, k: dict[str, np.ndarray], sched_first: np.ndarray, sched_end: np.ndarray, size: int
    ) -> list[EntryChunk] | Iterator[EntryChunk]:
        """The chunks of a pass: views of columns in memory (or mapped whole) cost nothing to
        make, so they are handed over at once, a list; a recording index's mapped pieces are
        read as the pass goes, their pages handed back (`_read_chunks`)."""
        chunks = self._chunk_spans(k, sched_first, sched_end, size)
        if any(isinstance(self._per_entry[name], list) for name in _CHUNK_COLS):
            return self._read_chunks(chunks)
        return list(chunks)

    def _read_chunks(self, chunks: Iterator[EntryChunk]) -> Iterator[EntryChunk]:
        for i, found in enumerate(chunks, 1):
            yield found
            if i % HAND_BACK == 0:
                self.hand_back()
        self.hand_back()

    def _chunk_spans(
        self, k: dict[str, np.ndarray], sched_first: np.ndarray, sched_end: np.ndarray, size: int
    ) -> Iterator[EntryChunk]:
        n = len(self.ctx)
        item_end, wait_end = np.cumsum(k["k_items"]), np.cumsum(k["k_wait"])
        r0 = 0
        while r0 < n:
            r1 = max(r0 + 1, int(np.searchsorted(sched_end, sched_first[r0] + size, side="right")))
            r1 = min(r1, n)
            lo, hi = int(sched_first[r0]), int(sched_end[r1 - 1])
            w0, w1 = (int(wait_end[r0 - 1]) if r0 else 0), int(wait_end[r1 - 1])
            j0, j1 = (int(item_end[r0 - 1]) if r0 else 0), int(item_end[r1 - 1])
            yield EntryChunk(
                r0=r0,
                r1=r1,
                req=self.span("sched_req", lo, hi),
                tokens=self.span("sched_tokens", lo, hi),
                spec=self.span("sched_spec", lo, hi),
                sampled=self.span("sched_sampled", lo, hi),
                wait=self.span("wait", w0, w1),
                items_req=self.span("items_req", j0, j1),
                items_n=self.span("items_n", j0, j1),
            )
            r0 = r1

    def problem(self, columns: dict[str, np.ndarray] | None = None, *, deep: bool = True) -> str | None:
        """What makes these columns inconsistent (lengths, counts that differ from the
        trace's own `columns`; with `deep`, ids that do not parse and codes outside the id
        table: a pass over every entry), or None: checked before they are trusted."""
        n = len(self.ctx)
        if any(len(v) != n for v in self.steps.values()):
            return "step arrays of unequal lengths"
        k = self.steps
        if any(int(v.min(initial=0)) < 0 for v in k.values()):
            return "negative counts"
        expect = {
            "sched": int(k["k_new"].sum(dtype=np.int64) + k["k_res"].sum() + k["k_run"].sum()),
            "items": int(k["k_items"].sum(dtype=np.int64)),
            "wait": int(k["k_wait"].sum(dtype=np.int64)),
            "pre": int(k["k_pre"].sum(dtype=np.int64)),
            "fin": int(k["k_fin"].sum(dtype=np.int64)),
            "arr": int(k["k_arr"].sum(dtype=np.int64)),
        }
        got = {
            "sched": {self._count(f"sched_{name}") for name in SCHED_COLS},
            "items": {self._count(f"items_{name}") for name in ITEM_COLS},
            "wait": {self._count("wait")},
            "pre": {self._count("pre")},
            "fin": {self._count("fin")},
            "arr": {self._count("arr"), self._count("arr_t")},
        }
        for name, count in expect.items():
            if got[name] != {count}:
                return f"{name}: {sorted(got[name])} entries, the step counts say {count}"
        if columns is not None:
            if len(columns["step"]) != n:
                return f"{n} steps, the trace has {len(columns['step'])}"
            for mine, theirs in (
                ("k_new", "n_new"),
                ("k_res", "n_resumed"),
                ("k_run", "n_running"),
                ("k_pre", "n_preempted"),
                ("k_fin", "n_finished"),
            ):
                if not np.array_equal(k[mine], columns[theirs]):
                    return f"{mine} differs from the trace's {theirs}"
        if deep and not self.checked:
            try:
                n_ids = len(self.ids)
            except (ValueError, orjson.JSONDecodeError) as exc:
                return f"ids: {exc}"
            for name in ("sched_req", "items_req", "wait", "pre", "fin", "arr"):
                value = self._per_entry[name]
                # Piece by piece: a recording index's columns are not joined (nor kept) for this.
                for codes in value if isinstance(value, list) else [value]:
                    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= n_ids):
                        return "request codes outside the id table"
                    if isinstance(value, list):
                        self.hand_back()
            self.checked = True
        return None

    # -- kept in the reader's sidecar ---------------------------------------------------

    def arrays(self, first_id: int = 0) -> dict[str, np.ndarray]:
        """The sidecar's arrays; `first_id`: write only the ids from that code on (a
        recording index's segment holds the ids its steps met first)."""
        out = {"e_ids": np.frombuffer(orjson.dumps(self.ids[first_id:]), dtype=np.uint8), "e_ctx": self.ctx}
        out.update({f"e_s_{name}": v for name, v in self.steps.items()})
        out.update({f"e_{name}": self.column(name) for name in PER_ENTRY})
        return out

    @classmethod
    def from_pieces(cls, pieces: dict[str, list[np.ndarray]]) -> Entries | None:
        """The columns `arrays()` wrote, one piece per sidecar segment; None if any is missing."""
        try:
            return cls(
                ids=list(pieces["e_ids"]),
                steps={name: _join(pieces[f"e_s_{name}"]) for name in STEP_COLS},
                ctx=_join(pieces["e_ctx"]),
                per_entry={name: list(pieces[f"e_{name}"]) for name in PER_ENTRY},
            )
        except KeyError:
            return None


def _mapping(array: np.ndarray) -> Any:
    """The mmap an array was made on (np.frombuffer keeps it behind a memoryview), if any."""
    base = array.base
    return base.obj if isinstance(base, memoryview) else base


def _place(counts: np.ndarray) -> np.ndarray:
    """For entries laid out row by row, `counts[row]` per row: each one's place in its row."""
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _join(pieces: list[np.ndarray]) -> np.ndarray:
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


_CHUNK_COLS = ("sched_req", "sched_tokens", "sched_spec", "sched_sampled", "wait", "items_req", "items_n")
PER_ENTRY = (
    *(f"sched_{n}" for n in SCHED_COLS),
    *(f"items_{n}" for n in ITEM_COLS),
    "wait",
    "pre",
    "fin",
    "arr",
    "arr_t",
)
I32, I64 = np.dtype("<i4"), np.dtype("<i8")
SIDECAR_DTYPES: dict[str, np.dtype] = {
    "e_ids": np.dtype("u1"),
    "e_ctx": I64,
    **{f"e_s_{name}": I32 for name in STEP_COLS},
    **{f"e_{name}": I32 for name in PER_ENTRY},
    **{f"e_sched_{name}": np.dtype("u1") for name in BYTE_COLS},
    "e_arr_t": np.dtype("<f8"),
}


def _time(value: Any) -> float:
    """An arrival time as recorded (a wall time; a step number offline), NaN if not a number."""
    return float(value) if type(value) in (float, int) else float("nan")
