"""Format 1.2's compact step layout, and its conversion to the 1.1 layout every consumer reads.

1.1 writes one small list per scheduled request (`"running": [[id, tokens, spec, demand], …]`),
`sampled` as `{id: n}` and a drafts input `["d", ids, counts]` naming every id again. 1.2
writes the same facts once per request:

- `new`, `resumed`, `running`: parallel arrays `{"id": [...], "tokens": [...], "spec": [...],
  "demand": [...]}`; an empty group stays `[]` (the same in both layouts);
- `sampled`: a list of counts aligned with the step's scheduled order (new, then resumed,
  then running); still `{id: n}` when the model runner's requests were not exactly the
  scheduled ones, and null when unknown;
- a drafts input `["d", refs, counts]`: a request the step schedules is named by its
  0-based position in that order, any other by its id.

`expand` turns a 1.2 step back into exactly the 1.1 record (JSON object order aside), so
`Trace.step` hands every view, analysis and the replay the shape they always read. The
reader's general path runs the same function, so its checks are the format's: a malformed
compact field raises CompactError naming the field (`running.tokens`).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Final

GROUPS: Final = ("new", "resumed", "running")
COLUMNS: Final = ("id", "tokens", "spec", "demand")
_COLUMNS = itemgetter(*COLUMNS)
_JUST_INT = frozenset({int})
_COUNT_TYPES = frozenset({int, bool})
_JUST_STR = frozenset({str})
_REF_TYPES = frozenset({int, str})


class CompactError(ValueError):
    """A 1.2 field that cannot be read; `field` names it as the reader's errors do."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def columns(group: dict[str, Any], key: str) -> tuple[list[Any], list[int], list[Any], list[Any]]:
    """A compact group's four arrays, checked as the reader's fast path checks them: lists of
    one length, token counts exactly integers, spec counts integers (or bools, read as 1/0 as
    1.1's `int(spec)` does). Ids and demands are not checked, as in 1.1."""
    try:
        ids, tokens, spec, demand = _COLUMNS(group)
    except KeyError as exc:
        raise CompactError(f"{key}.{exc.args[0]}", "missing") from None
    if type(ids) is not list:
        raise CompactError(f"{key}.id", f"expected a list of request ids, got {ids!r}")
    n = len(ids)
    for name, values in (("tokens", tokens), ("spec", spec), ("demand", demand)):
        if type(values) is not list:
            raise CompactError(f"{key}.{name}", f"expected a list, got {values!r}")
        if len(values) != n:
            raise CompactError(f"{key}.{name}", f"expected {n} entries (one per id), got {len(values)}")
    if n and set(map(type, tokens)) != _JUST_INT:
        raise CompactError(f"{key}.tokens", f"expected integers, got {_first_other(tokens, _JUST_INT)!r}")
    if n and not set(map(type, spec)) <= _COUNT_TYPES:
        raise CompactError(f"{key}.spec", f"expected integers, got {_first_other(spec, _COUNT_TYPES)!r}")
    return ids, tokens, spec, demand


def _first_other(values: list[Any], types: frozenset[type]) -> Any:
    return next(v for v in values if type(v) not in types)


def size(group: Any) -> int:
    """Requests in a step's `new`, `resumed` or `running` group, in either layout."""
    if type(group) is dict:
        ids = group.get("id")
        return len(ids) if type(ids) is list else 0
    return len(group) if type(group) is list else 0


def refs_ok(refs: list[Any], n: int) -> bool:
    """Whether a 1.2 drafts input's refs are ids or positions in [0, n), in C-level calls
    (the reader's fast path checks every step's)."""
    types = set(map(type, refs))
    if types <= _JUST_STR:
        return True
    if not types <= _REF_TYPES:
        return False
    ints = refs if len(types) == 1 else list(filter(int.__instancecheck__, refs))
    return min(ints) >= 0 and max(ints) < n


def _order(record: dict[str, Any]) -> list[Any]:
    """The step's scheduled ids, in the order `sampled` and draft refs count them."""
    order: list[Any] = []
    for key in GROUPS:
        group = record.get(key)
        if type(group) is dict:
            order += group["id"]
        elif type(group) is list:
            order += [e[0] for e in group]  # 1.1 entries beside compact groups: read the same way
    return order


def expand(record: dict[str, Any], *, check: bool = True) -> dict[str, Any]:
    """A step record in the 1.1 layout, converted in place; a 1.0 or 1.1 step is returned as it is.

    Raises CompactError for a compact field that cannot be converted (the record is then
    left as it was). `check=False` skips the checks, for records the reader already
    loaded (its fast path checks what `columns` and `refs_ok` do): a third of the cost."""
    if check:
        groups = [(key, columns(g, key)) for key in GROUPS if type(g := record.get(key)) is dict]
    else:
        groups = [(key, _COLUMNS(g)) for key in GROUPS if type(g := record.get(key)) is dict]
    sampled = record.get("sampled")
    if not groups and type(sampled) is not list:
        return record  # 1.0/1.1, or a 1.2 step that scheduled nothing and has no sampled list
    order = _order(record)
    inputs = record.get("inputs")
    drafts = [e for e in inputs if _is_drafts(e)] if type(inputs) is list else []
    if check:
        _check_aligned(sampled, drafts, len(order))
    for key, (ids, tokens, spec, demand) in groups:
        record[key] = list(map(list, zip(ids, tokens, spec, demand, strict=True)))
    if type(sampled) is list:
        record["sampled"] = dict(zip(order, sampled, strict=True))
    if drafts and order:
        position = dict(enumerate(order))
        for entry in drafts:
            # A position maps to its id; an id is its own default.
            entry[1] = list(map(position.get, entry[1], entry[1]))
    return record


def _check_aligned(sampled: Any, drafts: list[list[Any]], n: int) -> None:
    """`sampled` (when a list) and the drafts' refs against the n scheduled requests."""
    if type(sampled) is list:
        if len(sampled) != n:
            raise CompactError(
                "sampled", f"expected {n} counts (one per scheduled request), got {len(sampled)}"
            )
        if sampled and not set(map(type, sampled)) <= _COUNT_TYPES:
            raise CompactError("sampled", f"expected integers, got {_first_other(sampled, _COUNT_TYPES)!r}")
    for entry in drafts:
        if not refs_ok(entry[1], n):
            raise CompactError("inputs", f"a drafts input's refs must be request ids or positions below {n}")


def _is_drafts(entry: Any) -> bool:
    return type(entry) is list and len(entry) == 3 and entry[0] == "d" and type(entry[1]) is list
