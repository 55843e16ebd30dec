"""Every sentence a user reads is in `tracer/render/`: the views (`tui/`, `web/`) lay words out
but do not word them. This reads the views' source with `ast` and fails on a string literal that
reads like words, outside the few places where a string is not prose a user reads."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

from tests.conftest import ROOT

VIEWS = ("tui", "web")

# Markup is layout; what is between the tags is read: Rich/Textual's ("[b]", "[/]", "[b $primary]"),
# HTML tags ("<br>", "<extra></extra>"), Plotly's %{y} fields and Dash's {%title%} page slots.
_MARKUP = re.compile(r"\[/?[a-z $#0-9_.-]*\]|<[^<>]*>|%\{[^}]*\}|\{%[a-z_]+%\}")
_WORD = re.compile(r"[A-Za-z]{2,}")

# The allowlist, by where a literal stands (each a kind of string that is not prose):
# keyword arguments naming a component, its CSS classes or its style ("1px solid #ccc").
NON_PROSE_KEYWORDS = {"id", "className", "classes", "style"}
# Dict values under these keys name a Plotly reference frame ("x domain"), not words.
NON_PROSE_DICT_KEYS = {"xref", "yref"}
# Assignments holding another language (CSS, JavaScript, an HTML page template). Words a script
# shows come from render too (web.callbacks' UPLOAD_GATE_JS takes render.labels.UPLOAD_WORDS_JS).
CODE_NAME = re.compile(r"(^|_)(CSS|JS|HTML)$")
# Calls whose first argument is a name or a pattern: attributes, environment, regexes.
NAME_CALLS = {"getattr", "hasattr", "get", "setdefault", "compile", "search"}
# Log lines are for whoever runs the server, not the viewer's user.
LOGGERS = {"log", "logger"}


def reads_like_words(text: str) -> bool:
    """Two words (a word of two letters or more and a space), or a capitalised word longer
    than three characters: "Budget per step", "Quit", "[b]Requests[/b]", "‖ paused"."""
    bare = _MARKUP.sub("", text).strip()
    if _WORD.search(bare) and re.search(r"\s", bare):
        return True
    return len(bare) > 3 and bare[0].isupper()


def _allowed(tree: ast.AST) -> set[int]:
    """The ids of the literal nodes that stand where a string is not prose."""
    out: set[int] = set()

    def allow(node: ast.AST | None) -> None:
        if node is not None:
            out.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        scopes = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        first = body[0] if isinstance(node, scopes) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            allow(first)  # a docstring
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if any(CODE_NAME.search(n) or n == "__all__" for n in names):
                allow(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            if CODE_NAME.search(node.target.id):
                allow(node.value)
        elif isinstance(node, ast.keyword) and node.arg in NON_PROSE_KEYWORDS:
            allow(node.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                allow(key)  # a Dash prop's or a figure's key
                if isinstance(key, ast.Constant) and key.value in NON_PROSE_DICT_KEYS:
                    allow(value)
        elif isinstance(node, ast.Subscript):
            allow(node.slice)  # os.environ["X"], config["X"]
        elif isinstance(node, ast.Compare):
            allow(node)  # a name compared, never shown
        elif isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", None) or getattr(func, "attr", None)
            owner = getattr(getattr(func, "value", None), "id", None)
            if name in NAME_CALLS:
                # getattr(obj, "NAME"), environ.get("NAME"), re.compile("pattern")
                for arg in node.args[: 2 if name.endswith("attr") else 1]:
                    allow(arg)
            if owner in LOGGERS:
                allow(node)
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            # Python's own errors (AttributeError, TypeError) are for programmers; an error the
            # user reads (UploadError) is worded in render like any sentence.
            allow(node.exc if getattr(node.exc.func, "id", None) in vars(builtins) else None)
    return out


def wordy_literals(source: str, filename: str = "<view>") -> list[str]:
    """`file:line: 'text'` for each literal that reads like words and is not allowlisted."""
    tree = ast.parse(source, filename=filename)
    allowed = _allowed(tree)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.JoinedStr):
            # An f-string reads as a whole: its literal parts with each field as a digit.
            text = "".join(v.value if isinstance(v, ast.Constant) else "0" for v in node.values)
            allowed.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if reads_like_words(text):
            found.add((node.lineno, text))
    return [f"{filename}:{line}: {text!r}" for line, text in sorted(found)]


def view_files() -> list[Path]:
    return sorted(p for view in VIEWS for p in (ROOT / view).rglob("*.py"))


def test_the_views_word_nothing_themselves() -> None:
    files = view_files()
    assert len(files) > 30  # the walk really saw tui/ and web/
    found = [hit for p in files for hit in wordy_literals(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == [], "words in a view: move them to tracer/render/ (tracer/render/labels.py)"


def test_the_check_catches_a_label_and_passes_layout() -> None:
    snippet = '''
"""A module docstring may say anything."""
from textual.widgets import Static

CSS = "Static { height: 1; }"
UPLOAD_JS = "function(a) { return a + 1; }"


def compose(self):
    """So may a function's."""
    log.warning("not read by the user, read by whoever runs it")
    yield Static("Budget per step", id="budget-per-step", classes="title big")
    yield Static(f"[b]Step {self.n}[/b]")
    yield Static("Quit")
    yield Static("[b]Requests[/b]")
    yield Static(f"{self.n:>5} {self.m}")
    yield Static(os.environ["BROWSER_PATH"], style={"border": "1px solid #ccc"})
    yield Static(Content.styled(self.title, style="bold $accent"))
    if name == "Some Name":
        raise AttributeError(f"no attribute {name!r}")
    raise UploadError("not a trace file")


BINDINGS = [Binding("n", "next_flag", "Next flag", key_display="n/N")]
parser.add_argument("--port", help="port to bind")
'''
    assert [hit.split(": ", 1)[1] for hit in wordy_literals(snippet)] == [
        "'Budget per step'",
        "'[b]Step 0[/b]'",
        "'Quit'",
        "'[b]Requests[/b]'",
        "'not a trace file'",
        "'Next flag'",  # a binding's description is read in the footer and the key help
        "'port to bind'",
    ]
