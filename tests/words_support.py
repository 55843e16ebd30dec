"""What reads like words, for the static checks that every sentence a user reads is worded in
`tracer/render/`: tests/test_view_words.py (the views) and tests/test_command_words.py (the
command line)."""

from __future__ import annotations

import re

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
