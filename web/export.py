"""Downloads of the current figure: PNG (kaleido 1.x driving the installed chromium) and standalone HTML."""

from __future__ import annotations

import atexit
import os
import shutil
import threading

import plotly.graph_objects as go

_server_lock = threading.Lock()
_server_started = False
SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def _browser_path() -> str | None:
    """The chromium kaleido should drive: $BROWSER_PATH, else Debian's (kaleido never downloads one here)."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    for path in SYSTEM_CHROMIUM:
        if os.path.exists(path):
            return path
    return shutil.which("chromium")


def _ensure_server() -> None:
    """Start kaleido's browser once: a first image costs ~3 s (browser start), later ones ~0.3 s."""
    global _server_started
    with _server_lock:
        if _server_started:
            return
        import kaleido

        path = _browser_path()
        if path:
            os.environ.setdefault("BROWSER_PATH", path)  # choreographer reads it
        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
        _server_started = True


def figure_png(fig: go.Figure, *, width: int = 1400, scale: float = 1.0) -> bytes:
    import kaleido

    _ensure_server()
    height = fig.layout.height or 900
    spec = {"format": "png", "width": width, "height": height, "scale": scale}
    return kaleido.calc_fig_sync(fig, opts=spec)


def figure_html(fig: go.Figure) -> str:
    """A self-contained page (plotly.js inlined): opens offline, shares as one file."""
    return fig.to_html(
        include_plotlyjs=True, full_html=True, config={"displaylogo": False}, div_id="schedscope"
    )
