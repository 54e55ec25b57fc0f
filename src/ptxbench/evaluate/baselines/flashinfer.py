"""FlashInfer's kernels as baselines: what vLLM and SGLang run for paged decode, ragged prefill (bf16 and
fp8), MLA decode and RoPE, where ``flashinfer`` (flashinfer-python) is installed.

Each setup allocates the wrapper's workspace and calls its ``plan()`` (the schedule FlashInfer derives from
the index arrays, and on first use the JIT compilation of its kernels by nvcc and ninja) outside the timed
call, as a serving engine plans once per batch and runs every layer; the timed call is the wrapper's
``run()`` on the task's own tensors, in place (the pages are never gathered), plus what the task asks
beyond it: FlashInfer's decode log-sum-exp is base 2, the task's natural, so it is scaled by ln 2 inside
the timed call. RoPE uses FlashInfer's cos/sin-cache kernel (SGLang's and vLLM's path): its on-the-fly
kernel takes the angles' sine and cosine from the fast-math intrinsics, which the task rules out for
positions up to 32768; the cache is a model constant (a function of theta and D), built in setup. FA3's
kernels include curand's headers, which a CUDA install of the compiler alone lacks: setup then points the JIT
at the copy in NVIDIA's curand wheel (``curand_include_flag``).

The ``planned_*`` helpers build and plan one wrapper from tensors and values; the bundled tasks' setups here
and the imported tasks' (``flashinfer_api``, the API a definition names) share them.

Nothing here imports torch or flashinfer at module level: the evaluator reads the variants on machines
without them, and a variant whose ``flashinfer`` cannot be imported is skipped with that reason.
"""

from __future__ import annotations

import glob
import importlib.util
import math
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ptxbench.evaluate.baselines.calls import Outputs, Setup, Tensors, TimedCall, warmed

if TYPE_CHECKING:
    import torch

REQUIRES = ("flashinfer",)
LN2 = math.log(2.0)
# FlashInfer's recommended float workspace (split-k partial results); zeroed before its first use, as it asks.
WORKSPACE_BYTES = 128 << 20
# The rope task's positions lie in 0 .. 32767 (its statement): the cos/sin cache covers them all.
ROPE_MAX_POSITION = 32768
CURAND_HEADER = "curand_kernel.h"


def curand_include_flag(cuda_home: str, nvidia_roots: Iterable[str]) -> str | None:
    """``-isystem`` of the folder of NVIDIA's curand wheel headers where the CUDA toolkit at ``cuda_home`` has no
    curand_kernel.h, else None. FlashInfer's FA3 kernels include CUTLASS's utilities, which include it; a CUDA
    install of the compiler and runtime alone lacks it, while PyTorch's curand wheel (nvidia/<cu>/include) has it."""
    if os.path.isfile(os.path.join(cuda_home, "include", CURAND_HEADER)):
        return None
    for root in nvidia_roots:
        found = sorted(glob.glob(os.path.join(root, "*", "include", CURAND_HEADER)))
        if found:
            return f"-isystem {os.path.dirname(found[0])}"
    return None


def _prepare_jit() -> None:
    """Point FlashInfer's JIT (``FLASHINFER_EXTRA_CUDAFLAGS``, read when it writes a build) at curand's headers
    where the toolkit lacks them (``curand_include_flag``); nothing otherwise."""
    from flashinfer.jit.cpp_ext import get_cuda_path

    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    flag = curand_include_flag(get_cuda_path(), roots)
    current = os.environ.get("FLASHINFER_EXTRA_CUDAFLAGS", "")
    if flag is not None and flag not in current:
        os.environ["FLASHINFER_EXTRA_CUDAFLAGS"] = f"{current} {flag}".strip()


def _workspace(device: "torch.device") -> "torch.Tensor":
    """A zeroed float workspace of the setup's own: FlashInfer's plans may keep state in it, so wrappers of
    different input sets never share one (128 MiB each, on GPUs of 80 GB and more)."""
    import torch

    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)


def page_shape(k_cache: "torch.Tensor", kv_layout: str) -> tuple[int, int]:
    """(page size, KV heads) of a paged cache laid out ``NHD`` ([pages, page_size, heads, dim]) or ``HND``."""
    return (k_cache.shape[1], k_cache.shape[2]) if kv_layout == "NHD" else (k_cache.shape[2], k_cache.shape[1])


def planned_decode(wrapper_class: Any, q: "torch.Tensor", k_cache: "torch.Tensor", pages: Tensors, sm_scale: float,
                   kv_layout: str = "NHD", tensor_cores: bool = False, **plan_kwargs: Any) -> Any:
    """A decode wrapper planned on the page table ``pages`` (kv_indptr, kv_indices, kv_last_page_len), setup only."""
    _, heads, dim = q.shape
    page_size, kv_heads = page_shape(k_cache, kv_layout)
    wrapper = wrapper_class(_workspace(q.device), kv_layout, use_tensor_cores=tensor_cores)
    wrapper.plan(pages["kv_indptr"], pages["kv_indices"], pages["kv_last_page_len"], heads, kv_heads, dim, page_size,
                 q_data_type=q.dtype, kv_data_type=k_cache.dtype, sm_scale=sm_scale, **plan_kwargs)
    return wrapper


def decode_gqa_paged(tensor_cores: bool) -> Setup:
    """``BatchDecodeWithPagedKVCacheWrapper`` over the NHD pages as given; ``tensor_cores`` picks its
    tensor-core (prefill-kernel) decode, which FlashInfer recommends for larger query-head groups."""
    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import flashinfer

        _prepare_jit()
        q, k_cache, v_cache = inputs["Q"], inputs["K_cache"], inputs["V_cache"]
        wrapper = planned_decode(flashinfer.BatchDecodeWithPagedKVCacheWrapper, q, k_cache, inputs,
                                 1.0 / math.sqrt(q.shape[2]), tensor_cores=tensor_cores)

        def call() -> Outputs:
            out, lse = wrapper.run(q, (k_cache, v_cache), return_lse=True)
            return {"O": out, "LSE": lse * LN2}
        return warmed(call)
    return setup


def planned_paged_prefill(wrapper_class: Any, q: "torch.Tensor", k_cache: "torch.Tensor", v_cache: "torch.Tensor",
                          pages: Tensors, causal: bool, sm_scale: float, kv_layout: str = "NHD",
                          **plan_kwargs: Any) -> Any:
    """A paged prefill wrapper planned on ``pages`` (qo_indptr, kv_indptr, kv_indices, kv_last_page_len), setup only."""
    page_size, kv_heads = page_shape(k_cache, kv_layout)
    wrapper = wrapper_class(_workspace(q.device), kv_layout)
    wrapper.plan(pages["qo_indptr"], pages["kv_indptr"], pages["kv_indices"], pages["kv_last_page_len"], q.shape[1],
                 kv_heads, q.shape[2], page_size, head_dim_vo=v_cache.shape[-1], causal=causal, sm_scale=sm_scale,
                 q_data_type=q.dtype, kv_data_type=k_cache.dtype, **plan_kwargs)
    return wrapper


def planned_ragged(wrapper_class: Any, q: "torch.Tensor", k: "torch.Tensor", qo_indptr: "torch.Tensor",
                   kv_indptr: "torch.Tensor", causal: bool, sm_scale: float, **plan_kwargs: Any) -> Any:
    """A ragged prefill wrapper over tokens-major (NHD) queries and keys, planned on the offsets, setup only."""
    wrapper = wrapper_class(_workspace(q.device), "NHD")
    wrapper.plan(qo_indptr, kv_indptr, q.shape[1], k.shape[1], q.shape[2], causal=causal, sm_scale=sm_scale,
                 q_data_type=q.dtype, kv_data_type=k.dtype, **plan_kwargs)
    return wrapper


def prefill_gqa_ragged(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """``BatchPrefillWithRaggedKVCacheWrapper``, causal, queries and keys both on seq_indptr; its backend is
    FlashInfer's choice for the GPU (FA3 on sm_90), its log-sum-exp asked for in natural log."""
    import flashinfer

    _prepare_jit()
    q, k, v, indptr = inputs["Q"], inputs["K"], inputs["V"], inputs["seq_indptr"]
    wrapper = planned_ragged(flashinfer.BatchPrefillWithRaggedKVCacheWrapper, q, k, indptr, indptr, causal=True,
                             sm_scale=1.0 / math.sqrt(q.shape[2]))

    def call() -> Outputs:
        out, lse = wrapper.run(q, k, v, return_lse=True, lse_base="ln")
        return {"O": out, "LSE": lse}
    return warmed(call)


def attention_fp8_fwd(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """``BatchPrefillWithRaggedKVCacheWrapper`` on the e4m3 inputs, one sequence of S tokens per batch entry
    (FlashInfer's backend for fp8 on sm_90 is FA3's fp8 kernel, which rounds P to e4m3 as the task allows).
    It takes tokens major ([B * S, H, D]), so the timed call re-lays out Q, K and V and lays O and the LSE
    back to [B, H, S, ...]: copies the task's layout costs this library. The descales are its per-head scale
    tensors, expanded from the task's one element in setup; the log-sum-exp is asked for in natural log."""
    import torch

    import flashinfer

    _prepare_jit()
    q8, k8, v8 = inputs["Q"], inputs["K"], inputs["V"]
    batch, heads, seq, dim = q8.shape
    kv_heads = k8.shape[1]
    indptr = torch.arange(batch + 1, dtype=torch.int32, device=q8.device) * seq
    # the plan reads heads and dims as tokens-major tensors have them: [tokens, heads, dim]
    wrapper = planned_ragged(flashinfer.BatchPrefillWithRaggedKVCacheWrapper, q8.transpose(1, 2)[0],
                             k8.transpose(1, 2)[0], indptr, indptr, causal=bool(sizes["causal"]),
                             sm_scale=1.0 / math.sqrt(dim), o_data_type=torch.bfloat16)
    scales = tuple(inputs[name].reshape(1).float().expand(count).contiguous()
                   for name, count in (("descale_q", heads), ("descale_k", kv_heads), ("descale_v", kv_heads)))

    def tokens_major(x: "torch.Tensor") -> "torch.Tensor":
        return x.transpose(1, 2).reshape(batch * seq, x.shape[1], dim)

    def call() -> Outputs:
        out, lse = wrapper.run(tokens_major(q8), tokens_major(k8), tokens_major(v8), *scales, return_lse=True,
                               lse_base="ln")
        return {"O": out.view(batch, seq, heads, dim).transpose(1, 2).contiguous(),
                "LSE": lse.view(batch, seq, heads).transpose(1, 2).contiguous()}
    return warmed(call)


def sequence_lengths(indptr: "torch.Tensor", last: "torch.Tensor", page_size: int) -> "torch.Tensor":
    """Tokens per sequence, int32: every page full but the last."""
    import torch

    pages = (indptr[1:] - indptr[:-1]).to(torch.int32)
    return (pages - 1) * page_size + last.to(torch.int32)


def planned_mla(module: Any, q_nope: "torch.Tensor", q_pe: "torch.Tensor", ckv: "torch.Tensor",
                qo_indptr: "torch.Tensor", kv_indptr: "torch.Tensor", kv_indices: "torch.Tensor",
                kv_lengths: "torch.Tensor", causal: bool, sm_scale: float, natural_lse: bool) -> Any:
    """``module.BatchMLAPagedAttentionWrapper`` planned on the CSR page table (split query and caches), setup
    only; ``natural_lse`` plans the natural-log LSE (``lse_mode="basee"``), else FlashInfer's base 2."""
    metadata = module.MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_lengths)
    wrapper = module.BatchMLAPagedAttentionWrapper(_workspace(q_nope.device))
    wrapper.plan(metadata=metadata, num_heads=q_nope.shape[1], head_dim_ckv=q_nope.shape[2],
                 head_dim_kpe=q_pe.shape[-1], page_size=ckv.shape[1], causal=causal, sm_scale=sm_scale,
                 q_data_type=q_nope.dtype, kv_data_type=ckv.dtype, query_layout="split", kv_cache_layout="split",
                 lse_mode="basee" if natural_lse else "base2")
    return wrapper


def mla_decode_paged(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """``BatchMLAPagedAttentionWrapper`` on the split query (q_nope, q_pe) and split caches (ckv, kpe), one
    query per sequence, not causal; sm_scale read once in setup (its plan takes a host float), the
    log-sum-exp asked for in natural log; the backend is FlashInfer's choice (FA3 first on sm_90)."""
    import torch
    import flashinfer.mla

    _prepare_jit()
    q_nope, q_pe, ckv, kpe = inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"]
    indptr = inputs["kv_indptr"]
    qo_indptr = torch.arange(q_nope.shape[0] + 1, dtype=torch.int32, device=q_nope.device)
    wrapper = planned_mla(flashinfer.mla, q_nope, q_pe, ckv, qo_indptr, indptr, inputs["kv_indices"],
                          sequence_lengths(indptr, inputs["kv_last_page_len"], sizes["P"]), causal=False,
                          sm_scale=float(inputs["sm_scale"].reshape(())), natural_lse=True)

    def call() -> Outputs:
        out, lse = wrapper.run(query=(q_nope, q_pe), kv_cache=(ckv, kpe), return_lse=True, return_lse_base_on_e=True)
        return {"output": out, "lse": lse}
    return warmed(call)


_COS_SIN: dict[tuple[int, int, str], Any] = {}  # this process's caches, by head dim, theta and device


def cos_sin_cache(dim: int, theta: int, device: "torch.device") -> "torch.Tensor":
    """[ROPE_MAX_POSITION, dim] fp32: per position the cosines of its dim / 2 angles, then their sines (the
    layout ``apply_rope_with_cos_sin_cache`` reads), each computed in float64 and rounded once."""
    import torch

    key = (dim, theta, str(device))
    if key not in _COS_SIN:
        exponent = torch.arange(dim // 2, dtype=torch.float64) * 2 / dim
        angles = torch.arange(ROPE_MAX_POSITION, dtype=torch.float64)[:, None] * float(theta) ** (-exponent)[None, :]
        _COS_SIN[key] = torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.float32).to(device)
    return _COS_SIN[key]


def rope(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """``apply_rope_with_cos_sin_cache`` (NeoX rotate-half, ``is_neox=True``) on Q and K viewed as
    [T, heads * D], writing new outputs (Q and K stay unchanged)."""
    import flashinfer

    q, k, positions = inputs["Q"], inputs["K"], inputs["positions"]
    dim, tokens = sizes["D"], q.shape[0]
    cache = cos_sin_cache(dim, sizes["theta"], q.device)

    def call() -> Outputs:
        q_out, k_out = flashinfer.apply_rope_with_cos_sin_cache(positions, q.view(tokens, -1), k.view(tokens, -1), dim,
                                                                cache, is_neox=True)
        return {"Q_out": q_out.view(q.shape), "K_out": k_out.view(k.shape)}
    return warmed(call)
