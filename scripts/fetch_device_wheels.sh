#!/usr/bin/env bash
# Fetch the wheels PTXBench needs on a GPU machine that has PyTorch but no internet and no pydantic
# (the lent H200s run Python 3.12). They land in .whl/ (git-ignored); on the GPU machine run
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src
#
# --ray adds Ray for `ptxbench eval --backend ray` and its GPU test, with the dependencies that machine
# lacks (jsonschema and its own; it has click, filelock, msgpack, protobuf, pyyaml, requests, attrs and
# aiohttp's parts). Ray's wheel is repacked without its Java jars and dashboard web client, which a
# Python-only run never loads: whole, it is larger (76 MiB) than a call to the device may carry (64 MiB).
#
# --llm adds the OpenAI SDK and the parts of its stack that machine lacks, for the GPU tests that put a
# scripted teacher behind a local OpenAI-compatible server (tests/gpu/test_fixit_gpu.py).
#
# --serve adds FastAPI, uvicorn and httpx with their pure-Python stack, for `ptxbench serve` and its
# throughput benchmark (benchmarks/serve_throughput.py) on the GPU machine.
#
# --baselines adds Liger-Kernel (pure Python, under 1 MiB; its Triton kernels need the torch and triton
# that machine has, so no dependency is fetched) for the "liger" vendor-baseline variants of rmsnorm and
# softmax (benchmarks/baselines.py); without it those variants are skipped with a reason.
#
# --flashinfer adds FlashInfer (flashinfer-python 0.7.2.post1, the "flashinfer" vendor-baseline variants of
# decode_gqa_paged, prefill_gqa_ragged, mla_decode_paged and rope) and apache-tvm-ffi, its one binary dependency
# that machine lacks (its own need, typing-extensions, is fetched above). Of flashinfer's other requirements the
# machine has click, einops, ninja, numpy, nvidia-ml-py, packaging, requests, tabulate, torch, tqdm and
# cuda-python's parts (cuda-bindings, cuda-core, cuda-pathfinder); cuda-tile, nccl4py, nccl-extensions,
# nvidia-cudnn-frontend and nvidia-cutlass-dsl serve only backends these kernels never select on sm_90
# (cuTile, communication, cuDNN, CuTe DSL) and are imported only there, so none is fetched. The wheel is pure
# Python plus the CUDA sources its JIT compiles (nvcc + ninja at first use, into FLASHINFER_WORKSPACE_BASE):
# whole it is 59 MiB, more than a call to the device may carry beside the repository, so it is repacked without
# the sources of the kernels these tasks never build (csrc's subfolders: MoE, sampling, Blackwell-only and
# model-specific kernels), CUTLASS's and CCCL's examples, tests, docs and Python packages, and the expert-parallel
# MoE package, none of which `import flashinfer` loads.
#
# --fa3 adds fa3-fwd 0.0.3 (27.6 MB), FlashAttention-3's own forward kernels for Hopper (fp8 e4m3 and bf16,
# varlen), for the "fa3" vendor-baseline variants of attention_fp8_fwd and prefill_gqa_ragged. Its one wheel is
# tagged cp39-abi3-manylinux_2_24_x86_64, hence that platform in download's list. No dependency is fetched: its
# interface imports only torch (einops, packaging and ninja, which it declares, it never imports). It was built for
# torch 2.10 and links libtorch_cuda and libcudart.so.13, so under another torch (another CUDA) its import may
# fail: the variants are then skipped with that reason.
#
# --cudnn-frontend adds nvidia-cudnn-frontend 1.32.0 (11.6 MB, cp312 manylinux_2_27/2_28 x86_64), the cuDNN
# frontend's Python graph API (import name `cudnn`), for the "cudnn_fp8" vendor-baseline variant of
# attention_fp8_fwd (cuDNN's own fp8 SDPA forward). No dependency is fetched: nvidia-cutlass-dsl and
# apache-tvm-ffi, which it declares, serve only its CuTe-DSL kernels; `import cudnn` and its graph API load
# neither. Its extension links no libcudnn: it dlopens one at import, PyTorch's (nvidia-cudnn-cu13) where no
# other is on LD_LIBRARY_PATH, and the variant refuses to run on another.
#
# Versions are pinned, so a rerun fetches the same files; .whl/ is replaced only once every download
# has succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
ray=0
llm=0
baselines=0
flashinfer=0
fa3=0
cudnn_frontend=0
serve=0
for arg in "$@"; do
    case "$arg" in
        --ray) ray=1 ;;
        --llm) llm=1 ;;
        --baselines) baselines=1 ;;
        --flashinfer) flashinfer=1 ;;
        --fa3) fa3=1 ;;
        --cudnn-frontend) cudnn_frontend=1 ;;
        --serve) serve=1 ;;
        *) echo "usage: $0 [--ray] [--llm] [--baselines] [--flashinfer] [--fa3] [--cudnn-frontend] [--serve]" >&2; exit 2 ;;
    esac
done
staging=$(mktemp -d .whl.new.XXXXXX)
trap 'rm -rf "$staging"' EXIT
download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 \
        -d "$staging" "$@"
}
download pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 pyelftools==0.33
if [ "$llm" = 1 ]; then
    download openai==3.57.0 jiter==0.19.0 sniffio==1.3.1 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 \
        anyio==4.16.0 h11==0.16.0
fi
if [ "$serve" = 1 ]; then
    download fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 opentelemetry-api==1.45.2 uvicorn==0.55.0 \
        click==8.5.1 h11==0.16.0 httpx==0.29.0 httpcore==1.0.9 anyio==4.16.0 sniffio==1.3.1 idna==3.20 \
        certifi==2026.10.19.post1
fi
if [ "$baselines" = 1 ]; then
    download liger-kernel==0.8.5
fi
if [ "$flashinfer" = 1 ]; then
    download flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.15.post2
    tools=$(mktemp -d)
    python3 -m pip install -q --target "$tools" wheel
    wheel=("$staging"/flashinfer_python-*.whl)
    PYTHONPATH="$tools" python3 -m wheel unpack -d "$tools/unpacked" "${wheel[0]}"
    package=("$tools"/unpacked/flashinfer_python-*/flashinfer)
    find "${package[0]}/data/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
    rm -rf "${package[0]}"/data/cutlass/{examples,python,test} \
        "${package[0]}"/data/cccl/{benchmarks,ci,cudax,docs,python} "${package[0]}/moe_ep"
    rm "${wheel[0]}"
    PYTHONPATH="$tools" python3 -m wheel pack -d "$staging" "$tools"/unpacked/flashinfer_python-*  # a fresh RECORD
    rm -rf "$tools"
fi
if [ "$fa3" = 1 ]; then
    download fa3-fwd==0.0.3
fi
if [ "$cudnn_frontend" = 1 ]; then
    download nvidia-cudnn-frontend==1.32.0
fi
if [ "$ray" = 1 ]; then
    download ray==2.60.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    tools=$(mktemp -d)
    python3 -m pip install -q --target "$tools" wheel
    wheel=("$staging"/ray-*.whl)
    PYTHONPATH="$tools" python3 -m wheel unpack -d "$tools/unpacked" "${wheel[0]}"
    rm -rf "$tools"/unpacked/ray-*/ray/jars "$tools"/unpacked/ray-*/ray/dashboard/client/build
    rm "${wheel[0]}"
    PYTHONPATH="$tools" python3 -m wheel pack -d "$staging" "$tools"/unpacked/ray-*  # writes a fresh RECORD
    rm -rf "$tools"
fi
rm -rf .whl
mv "$staging" .whl
trap - EXIT
ls -s --block-size=K .whl
