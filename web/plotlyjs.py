"""Which plotly.js the page loads: plotly.js's own cartesian bundle, fetched from the page's start.

dcc.Graph loads plotly.js when the first graph mounts, from the plotly package: the full bundle
(4.8 MB, 3-D, maps, WebGL). In headless chromium on two cores that took 0.9–1.0 s to evaluate,
the longest step of a first figure. Every figure here is cartesian (scatter and bar), and
plotly.js publishes a cartesian bundle (npm `plotly.js-cartesian-dist-min`, MIT, kept in
web/static with its licence) that evaluates in a third to a half of that (0.30–0.46 s against
0.87–1.0 s in the page). It is served at the address
the page asks for, and the page's head asks for it at once (a preload), so it arrives while the
page's own scripts run rather than after the layout (docs/performance-history.md).

The bundle is only served when its version is the plotly package's: plotly.py writes figures
for its own plotly.js. Otherwise the page loads the plotly package's bundle, as Dash would,
and `fallback` says why.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from dash import Dash
from flask import Response, request

from tracer.render import labels

BUNDLE = Path(__file__).with_name("static") / "plotly-cartesian.min.js"
# The address dash-renderer gives dcc.Graph for plotly.js (window._dashPlotlyJSURL), under the app's prefix.
PLOTLY_PATH = "_dash-component-suites/plotly/package_data/plotly.min.js"


def bundle_version(path: Path = BUNDLE) -> str | None:
    """The plotly.js version in a bundle's licence header, or None when it has none."""
    with path.open("rb") as f:
        head = f.read(300).decode("utf-8", "replace")
    m = re.search(r"plotly\.js \(cartesian - minified\) v(\d+\.\d+\.\d+)", head)
    return m.group(1) if m else None


def plotly_version() -> str:
    """The plotly.js version the installed plotly package writes figures for."""
    from plotly.offline import get_plotlyjs_version

    return str(get_plotlyjs_version())


def fallback() -> str | None:
    """Why the page loads the plotly package's full bundle, or None when it loads the cartesian one."""
    ours, theirs = bundle_version(), plotly_version()
    if ours != theirs:
        return labels.plotly_fallback(ours, theirs)
    return None


@cache
def _bundle_bytes() -> bytes:
    return BUNDLE.read_bytes()


def install(app: Dash) -> str:
    """Serve the cartesian bundle at the page's plotly.js address, if it fits; -> the head's
    preload tag for whichever bundle the page will load."""
    href = app.config.requests_pathname_prefix + PLOTLY_PATH
    if fallback() is None:
        route = app.config.routes_pathname_prefix + PLOTLY_PATH

        @app.server.before_request
        def _cartesian() -> Response | None:
            if request.path != route:
                return None
            return Response(_bundle_bytes(), mimetype="application/javascript")

    return f'<link rel="preload" as="script" href="{href}">'
