#!/usr/bin/env bash
# Install the peer engines the kit has adapters for (SGLang, vLLM) into the active environment
# without their CUDA stack: torch first (the CPU build unless one is installed), then each engine
# with --no-deps, then only the modules their cache-level import chains need, each with --no-deps.
# A plain `pip install sglang vllm` pulls several GB of CUDA wheels and another torch.
set -euo pipefail
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
VLLM_VERSION="${VLLM_VERSION:-0.33.0}"

python -c "import torch" 2>/dev/null || pip install -q torch==2.13.0
pip install -q --no-deps "sglang==${SGLANG_VERSION}" "vllm==${VLLM_VERSION}"
# What `from sglang.srt.mem_cache.radix_cache import RadixCache`, vLLM's v1 KV cache manager and
# its v1 Scheduler (whose ModelConfig imports the model's code: einops) import on the way (found by
# importing until nothing is missing). torchvision and datasets are
# not installed: kvconf.conformance.adapters.stand_ins stands in for them.
pip install -q --no-deps \
    numpy orjson psutil pybase64 requests urllib3 idna certifi triton pillow starlette anyio \
    msgspec pyzmq tqdm ipython traitlets aiohttp multidict attrs yarl propcache \
    aiohappyeyeballs aiosignal frozenlist transformers regex huggingface_hub httpx2 pyyaml \
    httpcore2 truststore h11 safetensors tokenizers sentencepiece dill apache-tvm-ffi \
    compressed_tensors loguru gguf cbor2 openai_harmony openai sniffio cachetools cloudpickle \
    uvloop py-cpuinfo prometheus_client xgrammar fastapi opentelemetry-api partial_json_parser \
    llguidance einops
kvconf engines
