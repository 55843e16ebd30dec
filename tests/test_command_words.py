"""The command line words nothing itself: the `cmd_*` functions (`tracer/commands/`) and
`tracer/cli.py`'s `main` print what `tracer/render/` returns (a report's lines, an error line,
a one-line status, a JSON document) and lay it out (`end=`, which stream), never a sentence of
their own. This reads their source with `ast` and fails on a string literal that reads like words
(`tests.words_support.reads_like_words`: two words, or a capitalised word of four characters or
more; an f-string reads as a whole, each field as a digit), outside this allowlist of strings
that are not sentences the product prints:

- `tracer/commands/arguments.py`, the whole module: argparse's help, descriptions and metavars
  are the parser's own documentation (`schedscope --help`), written beside the arguments they
  document; argparse words its usage errors itself. For the same reason, in `cli.py`, the
  top-level parser's `description=`, `epilog=` (`EPILOG`), `version=` and a `help=` (a plugin
  command's "unavailable here" in the command list) are allowed;
- docstrings, and a name rather than text: a subscript (`os.environ["X"]`), a dict's key (an
  environment variable's, a JSON document's field), a comparison's operand, the first argument
  of `getattr`/`.get`/`.setdefault`;
- a CamelCase identifier, a class's name (`"TracingAsyncScheduler"`, passed to vLLM).

What this cannot see is a sentence built without a wordy literal (a prefix such as `"# "` put
before a render line): the review keeps those in render too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT
from tests.words_support import docstrings, reads_like_words

# The parser's documentation, not output: see the module's docstring.
PARSER_MODULE = ROOT / "tracer" / "commands" / "arguments.py"
PARSER_KEYWORDS = {"help", "description", "epilog", "version", "metavar", "prog", "usage"}
# Calls whose first argument is a name, not text: an attribute, an environment variable.
NAME_CALLS = {"getattr", "hasattr", "get", "setdefault"}
CLASS_NAME = re.compile(r"(?:[A-Z][a-z0-9]+){2,}")


def command_files() -> list[Path]:
    commands = sorted((ROOT / "tracer" / "commands").glob("*.py"))
    return [p for p in commands if p != PARSER_MODULE] + [ROOT / "tracer" / "cli.py"]


def _allowed(tree: ast.AST) -> set[int]:
    """The ids of the literal nodes that stand where a string is not a printed sentence."""
    out: set[int] = set()

    def allow(node: ast.AST | None) -> None:
        if node is not None:
            out.update(id(n) for n in ast.walk(node))

    parser_names: set[str] = set()  # module constants passed as parser text (EPILOG)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in PARSER_KEYWORDS:
            allow(node.value)
            if isinstance(node.value, ast.Name):
                parser_names.add(node.value.id)
    for doc in docstrings(tree):
        allow(doc)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in parser_names for t in node.targets
        ):
            allow(node.value)
        elif isinstance(node, ast.Subscript):
            allow(node.slice)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                allow(key)  # an environment variable's name, a JSON document's field
        elif isinstance(node, ast.Compare):
            allow(node)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in NAME_CALLS:
                for arg in node.args[: 2 if name.endswith("attr") else 1]:
                    allow(arg)
    return out


def wordy_literals(source: str, filename: str = "<command>") -> list[str]:
    """`file:line: 'text'` for each literal that reads like words and is not allowlisted."""
    tree = ast.parse(source, filename=filename)
    allowed = _allowed(tree)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "0" for v in node.values)
            allowed.update(id(v) for v in node.values)  # its parts were read with it
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if reads_like_words(text) and not CLASS_NAME.fullmatch(text):
            found.add((node.lineno, text))
    return [f"{filename}:{line}: {text!r}" for line, text in sorted(found)]


def test_the_commands_word_nothing_themselves() -> None:
    files = command_files()
    assert {p.stem for p in files} >= {"reading", "whatif", "export", "live", "cli"}
    found = [hit for p in files for hit in wordy_literals(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == [], "words in a command: move them to tracer/render/ (tracer/render/command_lines.py)"


def test_the_check_catches_a_sentence_and_passes_the_rest() -> None:
    snippet = '''
"""A module docstring may say anything."""
import os
import sys

EPILOG = """examples:
  schedscope summary trace.jsonl
"""


def cmd_x(args):
    """So may a function's."""
    parser = argparse.ArgumentParser(description="Record and read traces.", epilog=EPILOG)
    sub.add_parser("x", help=f"(unavailable here: {exc})")
    token = os.environ.get("SCHEDSCOPE_STREAM_TOKEN") or os.environ["SOME TOKEN"]
    env = {**os.environ, "PYTHONPATH": root}
    if args.command != "serve now":
        cls = "TracingAsyncScheduler" if args.async_scheduler else "TracingScheduler"
    print(error_line(exc), file=sys.stderr)
    print(f"{where}{line}", end="")
    print("schedscope: error: something went wrong", file=sys.stderr)
    print(f"schedscope: error: cannot write {path}: {exc.strerror}", file=sys.stderr)
    print(f"note: {note_sentence(note)}")
    print("Done")
    sys.stderr.write("wrote it\\n")
'''
    assert [hit.split(": ", 1)[1] for hit in wordy_literals(snippet)] == [
        "'schedscope: error: something went wrong'",
        "'schedscope: error: cannot write 0: 0'",
        "'note: 0'",
        "'Done'",
        "'wrote it\\n'",
    ]
