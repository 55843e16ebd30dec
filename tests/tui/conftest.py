"""The TUI suite: its own pytest invocation.

    .venv/bin/python -m pytest -q tests/tui

Textual's async tests and the web suite's browser tests cannot share a pytest
process, so this folder is collected only when the command line names it
(or a file in it): the default `pytest` run, and the vLLM 0.33 venv that has no
textual, never import textual here. Snapshot SVGs live in __snapshots__/;
`--snapshot-update` rewrites them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _named(config: pytest.Config) -> bool:
    root = Path(config.invocation_params.dir)
    for arg in config.invocation_params.args:
        path = (root / str(arg).split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return None if _named(config) else True
