"""What reads like words, for the static checks that every sentence a user reads is worded in
`tracer/render/`: tests/test_view_words.py (the views) and tests/test_command_words.py (the
command line)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

# Markup is layout; what is between the tags is read: Rich/Textual's ("[b]", "[/]", "[b $primary]"),
# HTML tags ("<br>", "<extra></extra>"), Plotly's %{y} fields and Dash's {%title%} page slots.
MARKUP = re.compile(r"\[/?[a-z $#0-9_.-]*\]|<[^<>]*>|%\{[^}]*\}|\{%[a-z_]+%\}")
_WORD = re.compile(r"[A-Za-z]{2,}")


def reads_like_words(text: str) -> bool:
    """Two words (a word of two letters or more and a space), or a capitalised word longer
    than three characters: "Budget per step", "Quit", "[b]Requests[/b]", "‖ paused"."""
    bare = MARKUP.sub("", text).strip()
    if _WORD.search(bare) and re.search(r"\s", bare):
        return True
    return len(bare) > 3 and bare[0].isupper()


def docstrings(tree: ast.AST) -> Iterator[ast.Expr]:
    """The docstrings in `tree`: a module's, a class's or a function's first statement, when it
    is a bare string."""
    scopes = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(node, scopes) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            yield first
