"""Server-side registry of loaded traces, and opening uploads.

The browser names a trace only by the key the server gave it; it never sends a
path. Uploads are opened through tracer.opening.door: parsed in memory by
tracer.trace.ingest (no pickle, no eval, nothing written to disk); only the newest few are kept.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections import OrderedDict
from typing import Any

from tracer.analysis.compare import Comparison, compare
from tracer.analysis.memo import Memo, joint_memo
from tracer.analysis.session import Session
from tracer.opening.door import Spec, Upload, open_input
from tracer.render import labels
from tracer.trace.errors import TraceError
from tracer.trace.trace_type import Trace
from web.model import TraceView

DEFAULT_MAX_UPLOAD = 64 << 20  # bytes, before base64
MAX_UPLOADS_KEPT = 4


class UploadError(ValueError):
    """An upload that is not a trace we can open; the message is shown to the user."""


class TraceStore:
    def __init__(self, max_upload: int = DEFAULT_MAX_UPLOAD) -> None:
        self.max_upload = max_upload
        self._views: OrderedDict[str, TraceView] = OrderedDict()
        self._lock = threading.Lock()
        self._uploads = 0

    def put(self, view: TraceView) -> TraceView:
        with self._lock:
            self._views[view.key] = view
        return view

    def add(self, key: str, label: str, trace: Trace | Session, *, version: int = 0) -> TraceView:
        return self.put(TraceView.build(key, label, trace, version=version))

    def get(self, key: str | None) -> TraceView | None:
        if not key:
            return None
        with self._lock:
            return self._views.get(key)

    def trace_keys(self) -> list[str]:
        with self._lock:
            return list(self._views)

    def options(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"label": v.label, "value": k} for k, v in self._views.items()]

    def open_upload(self, contents: str, filename: str) -> TraceView:
        """Decode a dcc.Upload data URL, parse it as a trace and keep it; UploadError on anything else."""
        name = (filename or "upload").replace("/", "_")[-120:]
        header, sep, b64 = (contents or "").partition(",")
        if not sep or not header.startswith("data:") or ";base64" not in header:
            raise UploadError(labels.not_an_upload(name))
        if len(b64) * 3 // 4 > self.max_upload:
            raise UploadError(labels.upload_too_large(name, self.max_upload / 2**20))
        try:
            data = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise UploadError(labels.not_base64(name)) from None
        try:
            session = open_input(
                Spec(upload=Upload(data, name, max_decompressed=16 * self.max_upload))
            ).session
        except TraceError as exc:
            raise UploadError(labels.not_a_trace(exc)) from None
        with self._lock:
            self._uploads += 1
            key = f"upload-{self._uploads}"
            stale = [k for k in self._views if k.startswith("upload-")][: -(MAX_UPLOADS_KEPT - 1) or None]
            for k in stale:
                del self._views[k]
        return self.add(key, labels.upload_label(name), session)

    def compared(self, key_a: str | None, key_b: str | None) -> tuple[Memo, Comparison, str] | None:
        """The two traces' comparison, remembered for their two Sessions (tracer.analysis.memo
        .joint_memo: each snapshot's own report, nothing detects again), with that memo (for what a
        view derives from the comparison) and the key naming the two snapshots. None unless both
        traces are here."""
        a, b = self.get(key_a), self.get(key_b)
        if a is None or b is None:
            return None
        joint = joint_memo(a.session, b.session)
        comparison = joint.once("comparison", lambda: compare(a.session, b.session))
        return joint, comparison, f"{a.key}:{a.version}|{b.key}:{b.version}"
