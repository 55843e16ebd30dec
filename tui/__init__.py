"""schedscope's terminal UI (Textual): a view over tracer's model, with no budget logic of its own.

Entry point: `make_app(...)` (used by `schedscope tui` and by the tests). Textual loads on
first use, not on import: `schedscope` imports `tui.cli` to declare the `tui` subcommand for
every command it runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SchedscopeApp", "make_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tui import app

        return getattr(app, name)
    raise AttributeError(f"module 'tui' has no attribute {name!r}")
