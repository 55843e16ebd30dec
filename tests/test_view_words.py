"""Every sentence a user reads is in `tracer/render/`: the views (`tui/`, `web/`) lay words out
but do not word them. This reads the views' source with `ast` and fails on a string literal in
either of two cases:

- by its shape, anywhere: it reads like words (`reads_like_words`: two words, or a capitalised
  word of four characters or more), outside the few places where a string is not prose a user
  reads (the allowlist below);
- by its position, whatever its shape: it is shown, that is it stands where a UI construct takes
  the text it displays (`shown_literals`: a widget's label, a column header, a Dash component's
  children, a figure's title, a trace's legend name, ...), and it holds a word, a run of two or
  more letters once markup is taken out. A one-word lowercase label ("tokens") has the shape of
  an identifier; only where it stands tells them apart.

A literal "stands" in a position when it is the value there, or a part of it: either branch of
a conditional, either side of `or`/`and` and of `+`, the text and the constant fields of an
f-string (each other field reads as a digit, its format spec not at all), the items of a list
or tuple given as children or columns, the first item of a (text, style) pair, a `str.join`'s
items and a lambda's result. A shown literal with no run of two letters (" ", "·", "—", "%", "A",
a format spec, markup alone, a Plotly `%{y}` field) is layout and stays in the view."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

from tests.conftest import ROOT
from tests.words_support import MARKUP, docstrings, reads_like_words

VIEWS = ("tui", "web")

# A word in a shown literal: two letters or more in a row, in any script ("ms", "µs", "KV").
_LETTERS = re.compile(r"[^\W\d_]{2,}")

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


# Where a literal is shown, by construct. The positional arguments (their indices; None: all of
# them) that a call shows as text, by the called name (a class, or a method's attribute name).
SHOWN_ARGS: dict[str, tuple[int, ...] | None] = {
    # Textual, as the TUI uses it: Static and Label show their first argument (every screen's
    # lines), TabPane its tab's title, TabbedContent's positional arguments are tabs' titles;
    # Static.update (and TextView.update) takes a panel's new text (a dict's update takes a
    # dict, whose literals are checked as a dict's); notify shows a toast (the "no further" and
    # "not a step" messages); a Binding's third argument is its description, in the footer and
    # the key help; a SystemCommand's first two are the command palette's title and help.
    "Static": (0,),
    "Label": (0,),
    "TabPane": (0,),
    "TabbedContent": None,
    "update": (0,),
    "notify": (0,),
    "Binding": (2,),
    "SystemCommand": (0, 1),
    # Rich's and Textual's text objects: the key help is built of Content; a list's and a
    # timeline's strips draw Segments. `assemble` takes text, or (text, style) pairs.
    "Content": (0,),
    "from_markup": (0,),
    "styled": (0,),
    "assemble": None,
    "Segment": (0,),
    "Text": (0,),
    # Textual's other labelled constructs, not in a view yet, so that a new one is seen: a
    # button's, tab's, checkbox's or tree's label, a DataTable's column headers, a tree node's
    # label, a Select's (text, value) options, an OptionList's prompt.
    "Button": (0,),
    "Tab": (0,),
    "Checkbox": (0,),
    "RadioButton": (0,),
    "Tree": (0,),
    "add_column": (0,),
    "add_columns": None,
    "add_node": (0,),
    "add_leaf": (0,),
    "Select": (0,),
    "Option": (0,),
    # The views' own constructs that show text: TextView and LifetimePanel show their first
    # argument as a Static does; ErrorScreen its message and hint, PromptScreen its title and
    # placeholder; a TUI Lane's name is printed left of its lane, a Mark's glyph in it; a web
    # Line's name is its legend entry, a Panel's first argument its title, Markers' its legend.
    "TextView": (0,),
    "LifetimePanel": (0,),
    "ErrorScreen": (0, 1),
    "PromptScreen": (0, 1),
    "Lane": (0,),
    "Mark": (1,),
    "Line": (0,),
    "Panel": (0,),
    "Markers": (0,),
}
# Keyword arguments that are shown text, to whatever call: Dash components' children, labels,
# title (a tooltip in HTML) and placeholder; Textual's tooltip, placeholder, description (a
# Binding's) and notify's title; Plotly's trace name (the legend), text and hover templates and
# a layout's titles (`title`, and `xaxis_title` and every other `*_title`); argparse's help; a
# Lane's or a Panel's note. (Textual widgets take `name=` too, an identifier: no view passes one.)
SHOWN_KEYWORDS = {
    "children",
    "label",
    "title",
    "tooltip",
    "placeholder",
    "description",
    "prompt",
    "message",
    "name",
    "text",
    "hovertext",
    "hovertemplate",
    "texttemplate",
    "help",
    "note",
    "options",  # a Dash dropdown's or checklist's options given as bare strings
}
# Dict values under these keys are shown: a Plotly figure's (a layout's or an axis's "title", a
# title's or an annotation's "text", a trace's "name" and hover templates, tick labels) and a
# Dash option's "label".
SHOWN_DICT_KEYS = {"title", "text", "name", "label", "hovertext", "hovertemplate", "texttemplate", "ticktext"}
# Assigned to these attributes (or class attributes), a value is shown: a Textual widget's
# border title and subtitle, the app's TITLE and SUB_TITLE (the header), a screen's title, a
# tooltip, and a VirtualList's `empty_text` (what it shows when it has no rows).
SHOWN_ATTRIBUTES = {
    "border_title",
    "border_subtitle",
    "TITLE",
    "SUB_TITLE",
    "title",
    "sub_title",
    "tooltip",
    "empty_text",
}
# Dash's component modules: `html.Th("step")`, `dcc.Tab(...)`; a component's first argument is
# its children.
DASH_MODULES = {"html", "dcc"}
# A VirtualList (tui.widgets.vlist) draws the (text, style) cells its subclasses' `header` and
# `row_cells` return: the first item of each pair built there is shown.
CELL_METHODS = {"header", "row_cells"}


def _allowed(tree: ast.AST) -> set[int]:
    """The ids of the literal nodes that stand where a string is not prose."""
    out: set[int] = set()

    def allow(node: ast.AST | None) -> None:
        if node is not None:
            out.update(id(n) for n in ast.walk(node))

    for doc in docstrings(tree):
        allow(doc)
    for node in ast.walk(tree):
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


Constants = dict[str, ast.expr]


def _constants(tree: ast.AST) -> Constants:
    """The module's and its classes' `NAME = "literal"` assignments: a name in a shown position
    shows its literal (`WORD = "tokens"` then `Static(WORD)`)."""
    out: Constants = {}
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
    for scope in scopes:
        for stmt in getattr(scope, "body", []):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant | ast.JoinedStr):
                out.update((t.id, stmt.value) for t in stmt.targets if isinstance(t, ast.Name))
    return out


def _shown_parts(node: ast.AST | None, consts: Constants, pairs: bool = False) -> list[tuple[int, str]]:
    """The literal text of an expression in a shown position, as (line, text): a string, an
    f-string read as a whole, and the parts of a conditional, a boolean, a sum, a list, a
    `sep.join(...)` or a lambda, and a module or class constant's literal. With `pairs`, a
    tuple is a (text, style) pair: its first item."""
    if isinstance(node, ast.Name) and node.id in consts:
        return _shown_parts(consts[node.id], {})
    if isinstance(node, ast.Constant):
        return [(node.lineno, node.value)] if isinstance(node.value, str) else []
    if isinstance(node, ast.JoinedStr):
        text = ""
        for v in node.values:
            if isinstance(v, ast.Constant):
                text += v.value
            elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Constant):
                text += str(v.value.value)  # f"{'request':<{W}}": the field is a literal
            else:
                text += "0"
        return [(node.lineno, text)]
    if isinstance(node, ast.IfExp):
        return _shown_parts(node.body, consts, pairs) + _shown_parts(node.orelse, consts, pairs)
    if isinstance(node, ast.BoolOp):
        return [part for v in node.values for part in _shown_parts(v, consts, pairs)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _shown_parts(node.left, consts, pairs) + _shown_parts(node.right, consts, pairs)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _shown_parts(node.left, consts, pairs)  # "%s steps" % n
    if isinstance(node, ast.Tuple) and pairs and node.elts:
        return _shown_parts(node.elts[0], consts)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [part for e in node.elts for part in _shown_parts(e, consts, pairs)]
    if isinstance(node, ast.ListComp | ast.GeneratorExp):
        return _shown_parts(node.elt, consts, pairs)
    if isinstance(node, ast.Starred):
        return _shown_parts(node.value, consts, pairs)
    if isinstance(node, ast.Lambda):
        return _shown_parts(node.body, consts, pairs)
    func = getattr(node, "func", None)
    if isinstance(func, ast.Attribute) and func.attr == "join" and isinstance(func.value, ast.Constant):
        return [part for a in node.args for part in _shown_parts(a, consts, pairs)]  # " · ".join([...])
    return []


def shown_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every literal standing where a UI construct shows it (see the module's
    docstring and the tables above)."""
    consts = _constants(tree)
    shown: list[tuple[int, str]] = []
    cell_tuples: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in CELL_METHODS:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Tuple) and id(sub) not in cell_tuples and len(sub.elts) == 2:
                    cell_tuples.add(id(sub))
                    shown += _shown_parts(sub.elts[0], consts)
        elif isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", None) or getattr(func, "attr", None)
            owner = getattr(getattr(func, "value", None), "id", None)
            if isinstance(func, ast.Attribute) and owner in DASH_MODULES:
                shown += _shown_parts(node.args[0] if node.args else None, consts)  # the children
            elif name in SHOWN_ARGS:
                where = SHOWN_ARGS[name]
                for i, arg in enumerate(node.args):
                    if where is None or i in where:
                        shown += _shown_parts(arg, consts, pairs=True)
            for kw in node.keywords:
                if kw.arg in SHOWN_KEYWORDS or (kw.arg or "").endswith("_title"):
                    shown += _shown_parts(kw.value, consts, pairs=kw.arg == "options")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in SHOWN_DICT_KEYS:
                    shown += _shown_parts(value, consts)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                attr = getattr(target, "attr", None) or getattr(target, "id", None)
                if attr in SHOWN_ATTRIBUTES:
                    shown += _shown_parts(node.value, consts)
    return shown


def wordy_literals(source: str, filename: str = "<view>") -> list[str]:
    """`file:line: 'text'` for each literal that reads like words and is not allowlisted, and
    for each shown literal that holds a word."""
    tree = ast.parse(source, filename=filename)
    allowed = _allowed(tree)
    found: set[tuple[int, str]] = set()
    for line, text in shown_literals(tree):
        if _LETTERS.search(MARKUP.sub("", text)):
            found.add((line, text))
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


def test_the_check_sees_a_one_word_label_by_where_it_stands() -> None:
    snippet = """
from dash import dcc, html
from textual.widgets import DataTable, Static

UNIT = "tokens"
LABEL_W = 22


def compose(self):
    table = DataTable()
    table.add_column("tokens")
    table.add_columns("step", labels.BUDGET)
    yield Static("tokens")
    yield Static(UNIT)
    yield Static("", id="engine")
    yield Static(" · ".join([labels.TIMELINE, "zoom"]))
    yield Static(f"{self.n:>5} {self.m}%")
    yield Static("[b]·[/b]" if self.on else "—")
    self.notify("paused", severity="warning")
    timeline.border_title = "timeline"
    timeline.border_subtitle = labels.TIMELINE_KEYS
    yield Lane("budget", "bar", "target", note="no data")
    yield Lane(labels.LANE_TARGET, "bar", "target")


def header(self):
    return [(f"{'request':<{LABEL_W}}", "header"), (" " * 3, "muted")]


def layout():
    return html.Div(
        [
            html.Tr([html.Th(""), html.Th("A"), html.Th("step"), html.Th(labels.DIFFERENCE)]),
            html.Button(labels.PAUSE, id="pause", title="pause"),
            dcc.Tab(label="sweep", value="sweep"),
            dcc.Checklist(id="follow", options=[{"label": "follow", "value": "on"}], value=["on"]),
            dcc.Input(id="filter", type="text", placeholder="kind"),
        ],
        id="page",
        className="controls",
    )


BINDINGS = [Binding("n", "next_flag", "next", key_display="n/N")]
FIGURE = {
    "data": [{"name": "budget", "mode": "lines", "hovertemplate": "%{y}<extra></extra>"}],
    "layout": {"xaxis": {"title": {"text": "step"}}, "yaxis": {"title": labels.TOKENS}},
}
fig.update_layout(xaxis_title="max_num_batched_tokens", template="plotly_white")
callback(Output("graph", "figure"), Input("trace", "value"))
"""
    assert [hit.split(": ", 1)[1] for hit in wordy_literals(snippet)] == [
        "'tokens'",  # UNIT, shown by Static(UNIT)
        "'tokens'",  # add_column
        "'step'",  # add_columns
        "'tokens'",  # Static
        "'zoom'",  # an item of a shown join
        "'paused'",  # a toast
        "'timeline'",  # a border title
        "'budget'",  # a lane's name
        "'no data'",  # a lane's note
        "'request'",  # a list's header cell
        "'step'",  # a Dash table header
        "'pause'",  # an HTML tooltip
        "'sweep'",  # a Dash tab's label (its value is an id)
        "'follow'",  # an option's label
        "'kind'",  # a placeholder
        "'next'",  # a binding's description
        "'budget'",  # a trace's legend name
        "'step'",  # an axis title's text
        "'max_num_batched_tokens'",  # an axis title
    ]
