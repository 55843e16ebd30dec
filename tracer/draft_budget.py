"""vLLM's own `Scheduler.schedule()` with a second, per-step draft-input budget.

The fork's fix for the additive double reservation (built on vllm#52996) keeps, beside
`token_budget` and `input_budget`, a budget for the rows of the separate drafter pass:
DSpark takes K rows and DFlash K+1 from it for every request scheduled in the step, target
tokens keep the whole `max_num_batched_tokens`. Its contract, line by line in `schedule()`:

- where `input_budget` starts, the draft budget starts (the drafter buffer's rows);
- both loops stop where they stop on `input_budget <= draft_slots`, and also when the draft
  budget cannot hold one more request's rows;
- where a request is charged `input_budget -= n + draft_slots`, it is charged its rows;
- where a preempted victim scheduled earlier in the step gives back `restored + draft_slots`,
  it gives back its rows;
- where `schedule()` asserts `input_budget >= 0`, it asserts the draft budget is too.

vLLM keeps its budgets in locals of `schedule()`, so no subclass can reach them. This module
takes the installed vLLM's own `schedule()` source and adds exactly those lines (an `ast`
rewrite, compiled against vLLM's module globals, line numbers kept), so every other decision
is the installed version's. Every vLLM from 0.31 to 0.34 has each anchor the expected number
of times; a version that does not is refused by name rather than patched half-way.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

BUDGET = "_schedscope_draft_budget"  # locals added to schedule()
ROWS = "_schedscope_draft_rows"

# The scheduler attributes the rewritten schedule() reads once per step.
BUDGET_ATTR = "schedscope_draft_budget"
ROWS_ATTR = "schedscope_draft_rows"

# anchor -> how many times vLLM 0.31-0.34's schedule() has it
EXPECTED = {"start": 1, "stop": 2, "charge": 2, "restore": 1, "assert": 1}


class RewriteError(RuntimeError):
    """The installed vLLM's schedule() lacks an anchor the draft budget is added at."""


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_input_budget_start(stmt: ast.stmt) -> bool:
    """`input_budget = self.scheduler_config.max_num_batched_tokens`"""
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and _is_name(stmt.targets[0], "input_budget")
        and isinstance(stmt.value, ast.Attribute)
        and stmt.value.attr == "max_num_batched_tokens"
    )


def _is_stop(node: ast.AST) -> bool:
    """`input_budget <= draft_slots`"""
    return (
        isinstance(node, ast.Compare)
        and _is_name(node.left, "input_budget")
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.LtE)
        and _is_name(node.comparators[0], "draft_slots")
    )


def _aug(stmt: ast.stmt, op: type) -> bool:
    """`input_budget -= … + draft_slots` (op Sub) or `input_budget += … + draft_slots` (op Add)."""
    return (
        isinstance(stmt, ast.AugAssign)
        and _is_name(stmt.target, "input_budget")
        and isinstance(stmt.op, op)
        and any(_is_name(n, "draft_slots") for n in ast.walk(stmt.value))
    )


def _is_final_assert(stmt: ast.stmt) -> bool:
    """`assert input_budget >= 0`"""
    test = getattr(stmt, "test", None)
    return (
        isinstance(stmt, ast.Assert)
        and isinstance(test, ast.Compare)
        and _is_name(test.left, "input_budget")
        and isinstance(test.ops[0], ast.GtE)
    )


def _stmt(code: str, at: ast.stmt) -> ast.stmt:
    new = ast.parse(code).body[0]
    for node in ast.walk(new):
        ast.copy_location(node, at)
        node.end_lineno, node.end_col_offset = at.end_lineno, at.end_col_offset  # type: ignore[attr-defined]
    return new


class _AddDraftBudget(ast.NodeTransformer):
    def __init__(self) -> None:
        self.seen = dict.fromkeys(EXPECTED, 0)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if not _is_stop(node):
            return node
        self.seen["stop"] += 1
        short = ast.Compare(
            left=ast.Name(BUDGET, ast.Load()), ops=[ast.Lt()], comparators=[ast.Name(ROWS, ast.Load())]
        )
        return ast.copy_location(ast.BoolOp(op=ast.Or(), values=[node, short]), node)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, field, self._statements(stmts))
        return node

    def _statements(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in stmts:
            if _is_final_assert(stmt):
                self.seen["assert"] += 1
                out += [stmt, _stmt(f"assert {BUDGET} >= 0, {BUDGET}", stmt)]
            elif _is_input_budget_start(stmt):
                self.seen["start"] += 1
                out += [
                    stmt,
                    _stmt(f"{BUDGET} = self.{BUDGET_ATTR}", stmt),
                    _stmt(f"{ROWS} = self.{ROWS_ATTR}", stmt),
                ]
            elif _aug(stmt, ast.Sub):
                self.seen["charge"] += 1
                out += [stmt, _stmt(f"{BUDGET} -= {ROWS}", stmt)]
            elif _aug(stmt, ast.Add):
                self.seen["restore"] += 1
                out += [stmt, _stmt(f"{BUDGET} += {ROWS}", stmt)]
            else:
                out.append(stmt)
        return out


def with_draft_budget(schedule: Callable[..., Any], version: str = "this vLLM") -> Callable[..., Any]:
    """`schedule` (vLLM's `Scheduler.schedule`) with the draft-input budget added.

    The result reads `self.schedscope_draft_budget` (rows the drafter pass may take in a step)
    and `self.schedscope_draft_rows` (rows each scheduled request takes; 0 never stops a loop)."""
    try:
        path = inspect.getsourcefile(schedule) or "<vllm scheduler>"
        lines, first = inspect.getsourcelines(schedule)
    except (OSError, TypeError) as exc:
        raise RewriteError(f"the draft-budget policy needs {version}'s schedule() source: {exc}") from exc
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    adder = _AddDraftBudget()
    tree = adder.visit(tree)
    if adder.seen != EXPECTED:
        missing = {k: (adder.seen[k], n) for k, n in EXPECTED.items() if adder.seen[k] != n}
        found = ", ".join(f"{k}: {got} where 0.31-0.34 have {n}" for k, (got, n) in missing.items())
        raise RewriteError(f"the draft-budget policy cannot be applied to {version}'s schedule(): {found}")
    ast.fix_missing_locations(tree)
    namespace: dict[str, Any] = {}
    exec(compile(tree, path, "exec"), schedule.__globals__, namespace)  # vLLM's module globals
    patched = namespace[schedule.__name__]
    patched.__qualname__ = schedule.__qualname__
    patched.__doc__ = schedule.__doc__
    return patched
