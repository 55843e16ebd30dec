"""schedscope's terminal UI (Textual): a view over tracer's model, with no budget logic of its own.

Entry point: `make_app(...)` (used by `schedscope tui` and by the tests).
"""

from __future__ import annotations

from tui.app import SchedscopeApp, make_app

__all__ = ["SchedscopeApp", "make_app"]
