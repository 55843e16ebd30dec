"""Textual markup the views put around render's words (render words them; the TUI styles them)."""

from __future__ import annotations


def bold(text: str) -> str:
    """`text` in bold: the `mark` render's phrases take for the part they name."""
    return f"[b]{text}[/b]"
