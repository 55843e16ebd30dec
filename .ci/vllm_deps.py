"""Print the installed vLLM's requirements less its GPU kernels, one a line, for `pip install -r`.

CUDA vLLM 0.34.0 pins kernels PyPI does not serve here (flashinfer-python==0.7.3) and that
the offline Scheduler never imports; .ci/test installs vLLM with --no-deps, then this list.
Run by the venv's own python (no `packaging` there before the list is installed).
"""

import importlib.metadata as metadata
import re

# GPU kernels, codecs and loaders: imported only by model runners and attention backends.
SKIP = {
    "flashinfer-python",
    "apache-tvm-ffi",
    "tilelang",
    "nvidia-cudnn-frontend",
    "nvidia-cutlass-dsl",
    "nvtx",
    "fastsafetensors",
    "instanttensor",
    "quack-kernels",
    "tokenspeed-mla",
    "humming-kernels",
    "pynvvideocodec",
    "torchaudio",
    "torchvision",
    "torchcodec",
}


def main() -> None:
    for req in metadata.requires("vllm") or ():
        name = re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0].lower().replace("_", "-")
        if "extra ==" in req or name in SKIP:
            continue
        print(req)


if __name__ == "__main__":
    main()
