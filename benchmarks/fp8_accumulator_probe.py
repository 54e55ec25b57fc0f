"""What does Hopper's fp8 wgmma keep of an fp32 accumulation? Measured, not assumed.

attention_fp8_fwd's LSE tolerance rested on "the fp8 products are exact in the fp32 accumulator"; the
DeepSeek-V3 report says the fp8 tensor cores keep about 14 bits. (Measured on an H100: 14, bf16 24;
benchmarks/results/fp8_accumulator_h100_80gb_hbm3.md. The task's tolerance is now derived from it.) This runs the real instruction
(wgmma.mma_async m64n128k32 e4m3 x e4m3 -> f32, k-steps chained into one accumulator as a main loop
does; fp8_accumulator_probe.cu) on inputs whose exact sums are known, beside the same values through
bf16 wgmma (m64n128k16, the control) and fp8 with promotion into a separate fp32 accumulator every 4
k-steps (128 values, DeepGEMM's scheme). Exact sums: every product of two e4m3 values is a multiple of
2^-18 below 2^18, so for K <= 2^16 every partial sum is exact in fp64, whatever the order.

It reports, per K (32 ... 1024) and input set, the error in fp32 ulps of the result, the bits kept
relative to the result and to the sum of |terms|; a bit sweep (L + L * 2^-j, the small term in the same
k-step, the next one, or first) that gives the retained bits directly; and the accumulator model
(alignment to the largest term of each k-step, truncation to b bits) that reproduces the GPU's results
best. From the model it derives what attention_fp8_fwd's LSE and O need (``derive_attention``).

    python benchmarks/fp8_accumulator_probe.py --out DIR        # GPU: build, probe, write the results
    python benchmarks/fp8_accumulator_probe.py --derive-bits 14  # CPU only: the tolerance for b bits
    python benchmarks/fp8_accumulator_probe.py --render RESULTS.json  # CPU only: its .md again

Writes ``fp8_accumulator_<gpu>.json`` and ``.md`` to --out. Needs nvcc (found as the harness finds it)
and libcuda; no torch or CuPy: the cubin is loaded through the driver API with ctypes.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SOURCE = Path(__file__).with_suffix(".cu")
HEADER_DIR = REPO / "src" / "ptxbench" / "context"
OUT = REPO / "benchmarks" / "results"
KS = (32, 64, 128, 256, 512, 1024)
PROBLEMS = 4  # CTAs per launch: 4 x 64 x 128 = 32768 dot products
ROWS_A, ROWS_B = 64, 128
SMEM_BYTES = 1024 + (ROWS_A + ROWS_B) * 128
# (name, kernel, promote every this many k-steps (0: never), k-step in elements)
# e4m3_promote32 adds every k-step's 32 products into fp32 registers: what is left is the instruction's own
# alignment of its 32 products (a 128-wide attention score has only 4 k-steps, so only this could fix it).
MODES = (("e4m3", "probe_e4m3", 0, 32), ("e4m3_promote128", "probe_e4m3", 4, 32),
         ("e4m3_promote32", "probe_e4m3", 1, 32), ("bf16", "probe_bf16", 0, 16))
SWEEP_J = tuple(range(1, 31))

# ---- e4m3 values ------------------------------------------------------------------------------------


def e4m3_table() -> np.ndarray:
    """The value of each of the 256 e4m3fn codes (NaN for the two NaN codes)."""
    codes = np.arange(256)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 15, codes & 7
    values = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6, (1 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    values = sign * values
    values[(exponent == 15) & (mantissa == 7)] = np.nan
    return values


E4M3 = e4m3_table()
FINITE = np.flatnonzero(np.isfinite(E4M3) & ~((E4M3 == 0) & (np.arange(256) >= 128)))  # one zero
ORDER = FINITE[np.argsort(E4M3[FINITE])]
SORTED = E4M3[ORDER]


def to_e4m3(x: np.ndarray) -> np.ndarray:
    """Codes of the e4m3 values nearest x (saturating at +-448): the inputs' quantisation."""
    x = np.clip(x, SORTED[0], SORTED[-1])
    hi = np.clip(np.searchsorted(SORTED, x), 1, len(SORTED) - 1)
    lo = hi - 1
    nearer_lo = (x - SORTED[lo]) <= (SORTED[hi] - x)
    return ORDER[np.where(nearer_lo, lo, hi)].astype(np.uint8)


def code_of(value: float) -> int:
    """The code of an exactly representable e4m3 value."""
    hits = np.flatnonzero(E4M3 == value)
    if not len(hits):
        raise ValueError(f"{value} is not an e4m3 value")
    return int(hits[0])


def bf16_bits(codes: np.ndarray) -> np.ndarray:
    """The bf16 bit patterns of e4m3 values (exact: 3 mantissa bits fit in bf16's 7)."""
    return (E4M3[codes].astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


# ---- inputs -----------------------------------------------------------------------------------------


def task_like(rng: np.random.Generator, shape: tuple[int, ...], outliers: bool = True) -> np.ndarray:
    """attention_fp8_fwd's Q and K: normal(0, 1) with 0.2 % outliers x 8, rounded to e4m3."""
    x = rng.standard_normal(shape)
    if outliers:
        x = np.where(rng.random(shape) < 0.002, 8 * x, x)
    return to_e4m3(x)


def dataset(name: str, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A [PROBLEMS, 64, k] and B [PROBLEMS, 128, k] codes of one input set."""
    shape_a, shape_b = (PROBLEMS, ROWS_A, k), (PROBLEMS, ROWS_B, k)
    if name == "integers":  # every partial sum an integer below 2^18: exact in fp32 in any order
        return (to_e4m3(rng.integers(-16, 17, shape_a).astype(float)),
                to_e4m3(rng.integers(-16, 17, shape_b).astype(float)))
    if name == "task_normal":
        return task_like(rng, shape_a), task_like(rng, shape_b)
    if name == "outlier_plus_small":  # one product near 2^16-2^17.6, the rest 2^-18 .. 4 of any sign
        def small(shape: tuple[int, ...]) -> np.ndarray:
            return ((rng.integers(0, 2, shape) << 7) | (rng.integers(0, 8, shape) << 3)
                    | rng.integers(0, 8, shape)).astype(np.uint8)
        a, b = small(shape_a), small(shape_b)
        for p in range(PROBLEMS):  # the large product first, last, in the middle, anywhere
            k0 = (0, k - 1, k // 2, int(rng.integers(0, k)))[p % 4]
            for m in (a, b):
                m[p, :, k0] = ((rng.integers(0, 2, m.shape[1]) << 7) | (15 << 3)
                               | rng.integers(0, 7, m.shape[1])).astype(np.uint8)
        return a, b
    raise ValueError(name)


DATASETS = ("integers", "task_normal", "outlier_plus_small")


def exact(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact sums and the sums of |terms| (fp64 is exact here: see the module's docstring)."""
    va, vb = E4M3[a], E4M3[b]
    return va @ vb.transpose(0, 2, 1), np.abs(va) @ np.abs(vb).transpose(0, 2, 1)


def sequential_fp32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An honest fp32 accumulator (k in order, round to nearest): what 'exact in fp32' would give."""
    va, vb = E4M3[a].astype(np.float32), E4M3[b].astype(np.float32)
    acc = np.zeros((a.shape[0], a.shape[1], b.shape[1]), dtype=np.float32)
    for k in range(a.shape[2]):
        acc += va[:, :, k, None] * vb[:, None, :, k]
    return acc


# ---- the GPU, through the driver API ---------------------------------------------------------------


class Driver:
    """Just enough of libcuda to load a cubin, move arrays and launch: no torch or CuPy needed."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self._check(self.lib.cuInit(0), "cuInit")
        self.device = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(self.device), 0), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device), "ctx retain")
        self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.module = ctypes.c_void_p()
        self.functions: dict[str, ctypes.c_void_p] = {}

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(name))
            raise RuntimeError(f"{what}: CUDA driver error {status} ({(name.value or b'?').decode()})")

    def name(self) -> str:
        buffer = ctypes.create_string_buffer(256)
        self._check(self.lib.cuDeviceGetName(buffer, 256, self.device), "cuDeviceGetName")
        return buffer.value.decode()

    def driver_version(self) -> str:
        version = ctypes.c_int()
        self._check(self.lib.cuDriverGetVersion(ctypes.byref(version)), "cuDriverGetVersion")
        return f"{version.value // 1000}.{version.value % 1000 // 10}"

    def load(self, cubin: bytes, names: tuple[str, ...]) -> None:
        self._image = ctypes.create_string_buffer(cubin)
        self._check(self.lib.cuModuleLoadData(ctypes.byref(self.module), self._image), "cuModuleLoadData")
        for name in names:
            function = ctypes.c_void_p()
            self._check(self.lib.cuModuleGetFunction(ctypes.byref(function), self.module, name.encode()), name)
            self.functions[name] = function

    def _alloc(self, nbytes: int) -> int:
        pointer = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        return pointer.value

    def run(self, kernel: str, a: np.ndarray, b: np.ndarray, k: int, promote: int) -> np.ndarray:
        """D [problems, 64, 128] fp32 of one launch (one CTA per problem)."""
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        problems = a.shape[0]
        out = np.empty((problems, ROWS_A, ROWS_B), dtype=np.float32)
        pointers = [self._alloc(x.nbytes) for x in (a, b, out)]
        try:
            for pointer, x in zip(pointers, (a, b)):
                self._check(self.lib.cuMemcpyHtoD_v2(pointer, x.ctypes.data, x.nbytes), "HtoD")
            args = [ctypes.c_uint64(p) for p in pointers] + [ctypes.c_int(k), ctypes.c_int(promote)]
            params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(x), ctypes.c_void_p) for x in args])
            self._check(self.lib.cuLaunchKernel(self.functions[kernel], problems, 1, 1, 128, 1, 1, SMEM_BYTES,
                                                None, params, None), f"launch {kernel}")
            self._check(self.lib.cuCtxSynchronize(), f"{kernel} ran")
            self._check(self.lib.cuMemcpyDtoH_v2(out.ctypes.data, pointers[2], out.nbytes), "DtoH")
        finally:
            for pointer in pointers:
                self.lib.cuMemFree_v2(pointer)
        return out


def nvcc() -> str:
    """The nvcc the harness would use."""
    from ptxbench.toolchain.discover import find_toolchain

    return str(find_toolchain().path("nvcc"))


def build(workdir: Path) -> bytes:
    """The probe's cubin for sm_90a."""
    cubin = workdir / "fp8_accumulator_probe.cubin"
    subprocess.run([nvcc(), "-arch=sm_90a", "-O3", "-std=c++17", "-cubin", "-I", str(HEADER_DIR), "-o", str(cubin),
                    str(SOURCE)], check=True, capture_output=True, text=True)
    return cubin.read_bytes()


def run_mode(driver: Driver, mode: tuple[str, str, int, int], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _, kernel, promote, _ = mode
    if kernel == "probe_bf16":
        return driver.run(kernel, bf16_bits(a), bf16_bits(b), a.shape[2], promote)
    return driver.run(kernel, a, b, a.shape[2], promote)


# ---- error measures ---------------------------------------------------------------------------------


def bits_of(relative: float) -> float | None:
    """-log2 of a relative error (None where the error is zero: every bit kept)."""
    return None if relative == 0 else -math.log2(relative)


def errors(got: np.ndarray, want: np.ndarray, terms: np.ndarray) -> dict[str, Any]:
    """How far fp32 results are from the exact sums: in ulps of the result, relative to it and to the sum
    of |terms| (bits kept), and the mean signed error in ulps (a truncating accumulator is biased)."""
    got64 = got.astype(np.float64)
    error = np.abs(got64 - want)
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    ulps = error / ulp
    signed = (got64 - want) * np.sign(want) / ulp
    nonzero, positive = want != 0, terms > 0
    relative = float((error[nonzero] / np.abs(want[nonzero])).max()) if nonzero.any() else 0.0
    relative_terms = float((error[positive] / terms[positive]).max()) if positive.any() else 0.0
    return {"finite": bool(np.isfinite(got).all()), "max_ulp": float(ulps.max()), "mean_ulp": float(ulps.mean()),
            "mean_signed_ulp": float(signed.mean()), "correctly_rounded": float((got == want.astype(np.float32)).mean()),
            "exact": float((got64 == want).mean()), "max_relative": relative, "bits_vs_result": bits_of(relative),
            "max_relative_to_terms": relative_terms, "bits_vs_terms": bits_of(relative_terms)}


# ---- the bit sweep ----------------------------------------------------------------------------------

PLACEMENTS = ("same_k_step", "next_k_step", "small_first")


def sweep_inputs(placement: str, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One problem per j: L = 2^15 (1 + (n % 8) / 8) and s = (-1)^m 2^(15 - j) at two positions of K = 2 steps.
    Returns A, B codes and L, s per output."""
    k = 2 * step
    k_large, k_small = {"same_k_step": (0, 1), "next_k_step": (0, step), "small_first": (step, 0)}[placement]
    zero = code_of(0.0)
    a = np.full((len(SWEEP_J), ROWS_A, k), zero, dtype=np.uint8)
    b = np.full((len(SWEEP_J), ROWS_B, k), zero, dtype=np.uint8)
    large_b = np.array([code_of(128 * (1 + (n % 8) / 8)) for n in range(ROWS_B)], dtype=np.uint8)
    for p, j in enumerate(SWEEP_J):
        e = 15 - j
        ea, eb = -((-e) // 2), e // 2  # ceil, floor: both within e4m3's 2^-9 .. 2^8
        a[p, :, k_large] = code_of(256.0)
        b[p, :, k_large] = large_b
        a[p, :, k_small] = [code_of((-1.0) ** m * 2.0 ** ea) for m in range(ROWS_A)]
        b[p, :, k_small] = code_of(2.0 ** eb)
    large = np.broadcast_to(256.0 * E4M3[large_b][None, None, :], (len(SWEEP_J), ROWS_A, ROWS_B))
    small = np.array([[(-1.0) ** m * 2.0 ** (15 - j) for m in range(ROWS_A)] for j in SWEEP_J])[:, :, None]
    return a, b, large, np.broadcast_to(small, large.shape)


def sweep(driver: Driver, mode: tuple[str, str, int, int]) -> dict[str, Any]:
    """Per placement and sign of s: for each j, the share of outputs that kept L + s exactly or lost s
    entirely; retained bits = 1 + the largest j up to which every output kept it."""
    result: dict[str, Any] = {}
    for placement in PLACEMENTS:
        a, b, large, small = sweep_inputs(placement, mode[3])
        got = run_mode(driver, mode, a, b).astype(np.float64)
        for sign, rows in (("positive", slice(0, None, 2)), ("negative", slice(1, None, 2))):
            kept = (got[:, rows] == (large + small)[:, rows]).mean(axis=(1, 2))
            lost = (got[:, rows] == large[:, rows]).mean(axis=(1, 2))
            error_in_s = (np.abs(got - large - small)[:, rows] / np.abs(small[:, rows])).mean(axis=(1, 2))
            full = [j for j, share in zip(SWEEP_J, kept) if share == 1.0]
            j_max = 0
            while j_max + 1 in full:
                j_max += 1
            result[f"{placement}/{sign}"] = {"retained_bits": j_max + 1, "kept": kept.round(4).tolist(),
                                             "lost": lost.round(4).tolist(), "mean_error_in_s": error_in_s.round(4).tolist()}
    return result


# ---- the accumulator model --------------------------------------------------------------------------


def to_fp32(x: np.ndarray, rounding: str) -> np.ndarray:
    """x (fp64) to fp32 by round-to-nearest or toward zero."""
    near = x.astype(np.float32)
    if rounding == "rn":
        return near
    over = np.abs(near.astype(np.float64)) > np.abs(x)
    return np.where(over, np.nextafter(near, np.float32(0)), near)


def emulate(products: np.ndarray, step: int, bits: int, truncation: str = "zero", final: str = "rz",
            cut: str = "terms") -> np.ndarray:
    """The model: each k-step adds its products to the accumulator after aligning all to the largest of
    them and cutting each (cut="terms") or only their exact sum (cut="sum") to `bits` significant bits of
    that largest term (toward zero or down); then the result goes to fp32.
    products: [..., K] exact fp64 in k order. Exact in fp64 for bits <= 46."""
    acc = np.zeros(products.shape[:-1])
    chop = np.trunc if truncation == "zero" else np.floor
    for k0 in range(0, products.shape[-1], step):
        terms = np.concatenate([acc[..., None], products[..., k0:k0 + step]], axis=-1)
        largest = np.abs(terms).max(axis=-1, keepdims=True)
        _, exponent = np.frexp(np.where(largest > 0, largest, 1.0))
        grain = np.ldexp(1.0, exponent - bits)  # the leading bit is 2^(exponent - 1)
        if cut == "terms":
            total = (chop(terms / grain) * grain).sum(axis=-1)
        else:
            total = chop(terms.sum(axis=-1) / grain[..., 0]) * grain[..., 0]
        acc = to_fp32(total, final).astype(np.float64)
    return acc.astype(np.float32)


def model_bound(a: np.ndarray, b: np.ndarray, step: int, bits: int) -> np.ndarray:
    """The worst error of any accumulator that, each k-step, aligns its terms to the largest and keeps
    `bits` bits of it, then rounds to fp32: per step, below (step + 1) grains of 2^(e + 1 - bits) plus one
    fp32 ulp, e = floor(log2 R) and R the sum of |terms| so far (no term or partial sum exceeds it).
    a, b: e4m3 codes [P, M, K] and [P, N, K]."""
    va, vb = np.abs(E4M3[a]), np.abs(E4M3[b])
    so_far = np.zeros((a.shape[0], a.shape[1], b.shape[1]))
    bound = np.zeros_like(so_far)
    for k0 in range(0, a.shape[2], step):
        so_far += va[:, :, k0:k0 + step] @ vb[:, :, k0:k0 + step].transpose(0, 2, 1)
        _, exponent = np.frexp(np.where(so_far > 0, so_far, 1.0))  # 2^(exponent - 1) <= R
        bound += np.where(so_far > 0, (step + 1) * np.ldexp(1.0, exponent - bits) + np.ldexp(1.0, exponent - 24), 0)
    return bound


MODEL_BITS = tuple(range(11, 26))


def fit_model(samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]], step: int) -> list[dict[str, Any]]:
    """The share of GPU results each model reproduces bit for bit (samples: A codes, B codes, GPU result),
    best first."""
    fits = []
    prepared = [(E4M3[a][:, :, None, :] * E4M3[b][:, None, :, :], got) for a, b, got in samples]
    for bits in MODEL_BITS:
        for truncation in ("zero", "down"):
            for final in ("rz", "rn"):
                for cut in ("terms", "sum"):
                    match = total = 0
                    for products, got in prepared:
                        match += int((emulate(products, step, bits, truncation, final, cut) == got).sum())
                        total += got.size
                    fits.append({"bits": bits, "truncation": truncation, "final": final, "cut": cut,
                                 "match": match / total})
    return sorted(fits, key=lambda f: -f["match"])


# ---- what attention_fp8_fwd needs -------------------------------------------------------------------


def derive_attention(bits: int, truncation: str = "zero", final: str = "rz", cut: str = "terms",
                     queries: int = 16, seed: int = 0) -> list[dict[str, Any]]:
    """Per workload of attention_fp8_fwd: the LSE and O errors that the score accumulator alone causes
    (model above, scores of 128 = 4 k-steps, no promotion), on sampled query rows of the task's input
    distribution at the largest descales (1.5 each: errors scale with them), against the tolerance."""
    from ptxbench.tasks.loader import get_task

    task = get_task("attention_fp8_fwd")
    tol_lse, tol_o = task.tolerance["LSE"], task.tolerance["O"]
    rng = np.random.default_rng(seed)
    descale_q = descale_k = 1.5
    descale_v = 0.75
    rows = []
    for workload in task.workloads:
        seq, causal = workload.sizes["S"], workload.sizes["causal"]
        q = E4M3[task_like(rng, (queries, 128))]
        k = E4M3[task_like(rng, (seq, 128))]
        v = E4M3[task_like(rng, (seq, 128), outliers=False)] * descale_v
        where = rng.integers(0, seq, queries) if causal else np.full(queries, seq - 1)
        if causal:  # the first rows see one key, or a few: their LSE is one score's, with no averaging
            where[:min(8, queries)] = np.arange(min(8, queries))
        scale = descale_q * descale_k / math.sqrt(128)
        want = (q @ k.T) * scale
        got = np.stack([emulate(q[i][None, :] * k, 32, bits, truncation, final, cut) for i in range(queries)]) * scale
        visible = np.arange(seq)[None, :] <= where[:, None] if causal else np.ones((queries, seq), dtype=bool)
        want, got = np.where(visible, want, -np.inf), np.where(visible, got.astype(np.float64), -np.inf)

        def lse(s: np.ndarray) -> np.ndarray:
            top = s.max(axis=1, keepdims=True)
            return (top + np.log(np.exp(s - top).sum(axis=1, keepdims=True)))[:, 0]

        lse_want, lse_got = lse(want), lse(got)
        p_want, p_got = np.exp(want - lse_want[:, None]), np.exp(got - lse_got[:, None])
        o_want, o_got = p_want @ v, p_got @ v
        floor = np.exp(want.max(axis=1) - lse_want) * 2.0 ** -6
        magnitude = np.sqrt(p_want ** 2 @ v ** 2 + floor[:, None] ** 2 * (visible.astype(float) @ v ** 2))
        bound_o = (tol_o.atol + tol_o.rtol * np.abs(o_want) + tol_o.rms_atol * np.sqrt((o_want ** 2).mean())
                   + tol_o.operand_rtol * magnitude)
        lse_error = np.abs(lse_got - lse_want)
        # The accumulator's error scales with sum_k |q_k k_k| (its running magnitude), not with the score:
        # an LSE_magnitude output (the P-weighted scaled sum of |terms|) would carry it, as O_magnitude does.
        terms = np.where(visible, (np.abs(q) @ np.abs(k).T) * scale, 0.0)
        lse_magnitude = (p_want * terms).sum(axis=1)
        rows.append({"workload": workload.name, "S": seq, "causal": causal, "queries": queries, "bits": bits,
                     "max_score": float(np.max(np.where(visible, want, -np.inf))),
                     "max_lse": float(lse_want.max()), "max_lse_error": float(lse_error.max()),
                     "max_lse_relative": float((lse_error / np.abs(lse_want)).max()),
                     "lse_atol_needed_at_rtol": float(np.max(lse_error - tol_lse.rtol * np.abs(lse_want))),
                     "lse_atol": tol_lse.atol, "lse_rtol": tol_lse.rtol,
                     "lse_error_over_bound": float(np.max(lse_error / (tol_lse.atol + tol_lse.rtol * np.abs(lse_want)))),
                     "lse_error_first_rows": float(lse_error[where < 8].max()) if (where < 8).any() else 0.0,
                     "lse_error_over_magnitude": float((lse_error / lse_magnitude).max()),
                     "max_score_error": float(np.max(np.abs(np.where(visible, got, 0.0) - np.where(visible, want, 0.0)))),
                     "o_error_over_o_bound": float((np.abs(o_got - o_want) / bound_o).max())})
    return rows


def derive_scores(bits: int, truncation: str = "zero", final: str = "rz", cut: str = "terms",
                  samples: int = 200_000, seed: int = 0, chunk: int = 20_000) -> dict[str, Any]:
    """The two kinds of LSE row that sampled rows seldom reach, one score each, under the model.

    A row whose LSE is one score has no averaging over keys: the first rows of a causal mask (one key,
    or a few), and rows where one key's score dominates because Q and K have an outlier (x8) at the same
    coordinate (about 128 * 0.002^2 = 5e-4 of all pairs: some 1e5 rows of each large workload, scores up
    to ~150, as the issue's failing kernels showed). For such a row |LSE error| is that score's error.
    Returns, over `samples` ordinary pairs, the worst absolute score error at the largest descales (1.5
    each) and the worst beyond the task's LSE rtol times |score| (what atol must cover), and, over `samples` pairs sharing an outlier
    whose score exceeds 20, the worst score error relative to the score (what rtol must cover), with
    their 99.9th percentiles."""
    from ptxbench.tasks.loader import get_task

    rtol = get_task("attention_fp8_fwd").tolerance["LSE"].rtol
    rng = np.random.default_rng(seed)
    scale = 1.5 * 1.5 / math.sqrt(128)
    ordinary, beyond, relative, scores = [], [], [], []
    for first in range(0, samples, chunk):
        n = min(chunk, samples - first)
        q, k = E4M3[task_like(rng, (n, 128))], E4M3[task_like(rng, (n, 128))]
        exact_ = (q * k).sum(axis=1)
        got = emulate(q * k, 32, bits, truncation, final, cut).astype(np.float64)
        ordinary.append(np.abs(got - exact_) * scale)
        beyond.append(ordinary[-1] - rtol * np.abs(exact_) * scale)
        c = rng.integers(0, 128, n)  # the shared outlier's coordinate
        rows = np.arange(n)
        x, y = 8 * rng.standard_normal(n), 8 * rng.standard_normal(n)
        q[rows, c], k[rows, c] = E4M3[to_e4m3(x)], E4M3[to_e4m3(np.sign(x) * np.abs(y))]  # a positive product
        exact_ = (q * k).sum(axis=1)
        got = emulate(q * k, 32, bits, truncation, final, cut).astype(np.float64)
        large = exact_ * scale > 20
        relative.append(np.abs(got - exact_)[large] / exact_[large])
        scores.append(exact_[large] * scale)
    absolute, rel, dominant = np.concatenate(ordinary), np.concatenate(relative), np.concatenate(scores)
    worst = int(np.argmax(rel))
    return {"bits": bits, "samples": samples, "max_abs_score_error": float(absolute.max()),
            "p999_abs_score_error": float(np.quantile(absolute, 0.999)), "lse_rtol": rtol,
            "max_abs_score_error_beyond_rtol": float(np.concatenate(beyond).max()), "dominated": int(len(rel)),
            "max_relative_dominant_error": float(rel.max()), "p999_relative_dominant_error": float(np.quantile(rel, 0.999)),
            "score_at_worst_relative": float(dominant[worst]), "max_dominant_score": float(dominant.max())}


def to_bf16(x: np.ndarray) -> np.ndarray:
    """fp32 values rounded to bf16 (nearest even), as fp64: a kernel's output rounding."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def gemm_error(a: np.ndarray, b: np.ndarray, promote: int, bits: int, truncation: str, final: str, cut: str,
               scales: np.ndarray | None = None) -> np.ndarray:
    """bf16 output of a model kernel for values a [M, K], b [N, K]: every `promote` values of K (0: all of
    K in one chain) a fresh wgmma accumulator is added into fp32 registers (times the block's scale
    [M, N, blocks] where given, as an FFMA)."""
    products = a[:, None, :] * b[None, :, :]
    block = promote or a.shape[1]
    total = np.zeros(products.shape[:-1], dtype=np.float32)
    for j, k0 in enumerate(range(0, a.shape[1], block)):
        partial = emulate(products[..., k0:k0 + block], 32, bits, truncation, final, cut).astype(np.float64)
        scale = 1.0 if scales is None else scales[..., j]
        total = (total.astype(np.float64) + partial * scale).astype(np.float32)  # one rounding, as an FFMA
    return to_bf16(total)


def derive_gemm(bits: int, truncation: str = "zero", final: str = "rz", cut: str = "terms", rows: int = 8,
                cols: int = 32, seed: int = 0) -> list[dict[str, Any]]:
    """Per workload of gemm_fp8 (no promotion, or every 128, 256, 512 of K) and gemm_fp8_blockscale (every
    128, as its scales require): the worst error over the task's bound on sampled outputs, output rounding
    to bf16 included. The reference gemm_fp8 kernel measured 0.21, 0.25 and 0.35 of the tolerance for
    128, 256 and 512 on an H200 (kernel_variants_h200.md): a check of the model."""
    from ptxbench.tasks.loader import get_task

    rng = np.random.default_rng(seed)
    found = []
    for task_id, output, promotions in (("gemm_fp8", "C", (0, 128, 256, 512)), ("gemm_fp8_blockscale", "D", (128,))):
        task = get_task(task_id)
        tolerance = task.tolerance_for(output)
        for workload in task.workloads:
            k = workload.sizes["K"]
            x = rng.standard_normal((rows, k))
            a = E4M3[to_e4m3(np.where(rng.random((rows, k)) < 0.001, 16 * x, x))]
            b = E4M3[to_e4m3(rng.standard_normal((cols, k)))]
            scales = None
            if task_id == "gemm_fp8_blockscale":  # positive scales, 1x128 for A and one per block of B's rows
                scales = (rng.random((rows, 1, k // 128)) + 0.5) * 0.05 * (rng.random((1, 1, k // 128)) + 0.5) * 0.01
            want = np.zeros((rows, cols))
            for j, k0 in enumerate(range(0, k, 128)):
                part = a[:, k0:k0 + 128] @ b[:, k0:k0 + 128].T
                want += part * (1.0 if scales is None else scales[..., j])
            bound = tolerance.atol + tolerance.rms_atol * np.sqrt((want ** 2).mean()) + tolerance.rtol * np.abs(want)
            row: dict[str, Any] = {"task": task_id, "workload": workload.name, "K": k, "bits": bits}
            for promote in promotions:
                got = gemm_error(a, b, promote, bits, truncation, final, cut, scales)
                row[f"error_over_bound_promote_{promote or 'never'}"] = float((np.abs(got - want) / bound).max())
            found.append(row)
    return found


def derive_summary(rows: list[dict[str, Any]]) -> str:
    """The lines the lead quotes in the task file."""
    worst = max(rows, key=lambda r: r["max_lse_error"])
    return (f"accumulator of {worst['bits']} bits: worst sampled |LSE error| {worst['max_lse_error']:.4g} "
            f"(relative {max(r['max_lse_relative'] for r in rows):.3g}) on {worst['workload']}; "
            f"atol needed beside rtol {rows[0].get('lse_rtol', 1e-4):.3g}: "
            f"{max(r['lse_atol_needed_at_rtol'] for r in rows):.4g}; "
            + (f"worst error / the task's LSE bound (atol {rows[0]['lse_atol']:.3g}, rtol {rows[0]['lse_rtol']:.3g}): "
               f"{max(r['lse_error_over_bound'] for r in rows):.3g}; " if "lse_error_over_bound" in rows[0] else "")
            + f"|LSE error| / LSE_magnitude up to {max(r['lse_error_over_magnitude'] for r in rows):.3g} "
            f"(2^{math.log2(max(r['lse_error_over_magnitude'] for r in rows)):.2f}); "
            f"O error / O tolerance up to {max(r['o_error_over_o_bound'] for r in rows):.3g} (accumulator alone)")


# ---- the run ----------------------------------------------------------------------------------------


def versions(driver: Driver) -> dict[str, str | None]:
    try:
        import torch  # only for the record: the probe does not use it
        torch_version: str | None = torch.__version__
    except Exception:  # noqa: BLE001 - torch is optional here
        torch_version = None
    compiler = subprocess.run([nvcc(), "--version"], capture_output=True, text=True).stdout
    return {"driver": driver.driver_version(), "torch": torch_version, "nvcc": compiler.strip().splitlines()[-1],
            "python": platform.python_version(), "numpy": np.__version__}


def probe(ks: tuple[int, ...] = KS, seed: int = 0) -> dict[str, Any]:
    started = time.perf_counter()
    driver = Driver()
    with tempfile.TemporaryDirectory() as workdir:
        driver.load(build(Path(workdir)), ("probe_e4m3", "probe_bf16"))
    result: dict[str, Any] = {"gpu": driver.name(),
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              **versions(driver), "command": " ".join(["python", *sys.argv]), "errors": []}
    result["sweep"] = {mode[0]: sweep(driver, mode) for mode in MODES if mode[2] == 0}
    retained = {name: min(row["retained_bits"] for row in rows.values()) for name, rows in result["sweep"].items()}
    rng = np.random.default_rng(seed)
    samples: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {m[0]: [] for m in MODES}
    for name in DATASETS:
        for k in ks:
            a, b = dataset(name, k, rng)
            want, terms = exact(a, b)
            rows = [{"mode": "cpu_fp32_sequential", **errors(sequential_fp32(a, b), want, terms)}]
            for mode in MODES:
                got = run_mode(driver, mode, a, b)
                row = {"mode": mode[0], **errors(got, want, terms)}
                if mode[0] in retained:  # the measured error against the sweep's bits: 1 or less if consistent
                    error = np.abs(got.astype(np.float64) - want)
                    row["error_over_sweep_bound"] = float((error / model_bound(a, b, mode[3], retained[mode[0]])).max())
                rows.append(row)
                if name != "integers" and k in (128, 256) and mode[2] == 0:
                    samples[mode[0]].append((a[:1, :16], b[:1], got[:1, :16]))
            for row in rows:
                result["errors"].append({"dataset": name, "K": k, **row})
    result["model"] = {mode[0]: fit_model(samples[mode[0]], mode[3])[:4] for mode in MODES if mode[2] == 0}
    best = result["model"]["e4m3"][0]
    result["attention_fp8_fwd"] = derive_attention(best["bits"], best["truncation"], best["final"], best["cut"])
    result["gemm_fp8"] = derive_gemm(best["bits"], best["truncation"], best["final"], best["cut"], rows=4, cols=16)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def results_stem(gpu: str) -> str:
    """fp8_accumulator_h100_80gb_hbm3 for "NVIDIA H100 80GB HBM3", as the other results files are named."""
    return "fp8_accumulator_" + gpu.lower().replace("nvidia", "").strip().replace(" ", "_")


def _fmt(x: float | None, digits: int = 3) -> str:
    return "all" if x is None else f"{x:.{digits}g}"


# Inputs whose exact sums cancel: signed terms of mean zero, so |sum| can lie far below sum |terms| (or be
# zero) and an error in ulps of the result, or relative to it, measures the cancellation, not the
# accumulator (the first GPU run printed 2.6e41 ulps and negative bits there). Their ulp columns are left
# out; the error relative to sum |terms| is the measure for every input.
CANCELLING = frozenset({"task_normal"})


def retained_summary(result: dict[str, Any]) -> str:
    """One line: the sweep's fewest retained bits per mode and the best model's share."""
    bits = ", ".join(f"{mode} {min(row['retained_bits'] for row in rows.values())}"
                     for mode, rows in result["sweep"].items())
    fits = "; ".join(f"{mode}: {fits[0]['bits']} bits, truncation toward {fits[0]['truncation']}, cut the "
                     f"{fits[0]['cut']}, reproduces {100 * fits[0]['match']:.1f} % of outputs bit for bit"
                     for mode, fits in result["model"].items())
    return f"Retained bits (the sweep's fewest over every placement): {bits}. Best accumulator model: {fits}."


def markdown(result: dict[str, Any], rendered_from: str | None = None) -> str:
    """The results file. rendered_from: the JSON it was re-rendered from offline (None: written by the run)."""
    how = "" if rendered_from is None else (
        f" Rendered from `{rendered_from}` by `python benchmarks/fp8_accumulator_probe.py --render` (no GPU; the "
        "measured numbers are the JSON's).")
    lines = [f"# wgmma accumulator precision, e4m3 against bf16, on {result['gpu']}", "",
             f"Measured at {result['date']} (driver {result['driver']}, {result['nvcc']}, torch {result['torch']}, "
             f"python {result['python']}, numpy {result['numpy']}) by `{result['command']}` in {result['seconds']} s."
             + how, "", retained_summary(result), "",
             "wgmma.mma_async m64n128k32 e4m3 (and m64n128k16 bf16 on the same values) with k-steps chained in "
             "one accumulator; e4m3_promote128 restarts it every 4 k-steps and adds it into fp32 registers, "
             "e4m3_promote32 every k-step. 32768 dot products per row, against the exact sum.", "",
             "Columns. **error / sum |terms|**: the worst |result - exact| over sum |a_k b_k|, the primary "
             "measure (an accumulator that aligns to its largest term loses bits relative to the terms, not "
             "to the result); **bits vs terms**: -log2 of it (\"all\": no error). **error / sweep bound**: the "
             "worst error over model_bound() with the sweep's fewest retained bits (at most 1 if the "
             "accumulator aligns each k-step to its largest term and keeps that many bits). **correctly rounded**: the share equal to the exact "
             "sum rounded to fp32. The ulp columns and bits vs result are relative to the result itself; they are shown only for inputs whose sums "
             "do not cancel (integers: exact; outlier_plus_small: one product dominates). task_normal's terms "
             "are signed with mean zero, so its sums are often near zero by cancellation and an error in ulps "
             "of such a result is unbounded (\"n/a\" there).", "",
             "| input | K | mode | error / sum \\|terms\\| | bits vs terms | error / sweep bound | correctly rounded | "
             "max ulp | mean ulp | mean signed ulp | bits vs result |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["errors"]:
        bound = _fmt(r["error_over_sweep_bound"]) if "error_over_sweep_bound" in r else "-"
        head = (f"| {r['dataset']} | {r['K']} | {r['mode']} | {r['max_relative_to_terms']:.3g} | "
                f"{_fmt(r['bits_vs_terms'])} | {bound} | {r['correctly_rounded']:.4f} | ")
        if r["dataset"] in CANCELLING:
            lines.append(head + "n/a | n/a | n/a | n/a |")
        else:
            lines.append(head + f"{_fmt(r['max_ulp'])} | {_fmt(r['mean_ulp'])} | {_fmt(r['mean_signed_ulp'])} | "
                         f"{_fmt(r['bits_vs_result'])} |")
    lines += ["", "## Bit sweep: L + s with s = L * 2^-j (retained bits: the leading bit and j below it kept)", "",
              "| mode | placement / sign of s | retained bits |", "|---|---|---|"]
    for mode, placements in result["sweep"].items():
        for key, row in placements.items():
            lines.append(f"| {mode} | {key} | {row['retained_bits']} |")
    lines += ["", "## Accumulator model (align each k-step to its largest term, keep b bits), best fits", "",
              "| mode | bits | truncation | cut | final rounding | outputs reproduced |", "|---|---|---|---|---|---|"]
    for mode, fits in result["model"].items():
        for fit in fits:
            lines.append(f"| {mode} | {fit['bits']} | {fit['truncation']} | {fit['cut']} | {fit['final']} | "
                         f"{fit['match']:.4f} |")
    lines += ["", "## attention_fp8_fwd under the best e4m3 model (score accumulator alone, sampled rows)", "",
              derive_summary(result["attention_fp8_fwd"]), "",
              "| workload | S | max score | max LSE | max LSE error | "
              f"atol needed at rtol {result['attention_fp8_fwd'][0].get('lse_rtol', 1e-4):.3g} | LSE error / magnitude | "
              "O error / O bound |", "|---|---|---|---|---|---|---|---|"]
    for r in result["attention_fp8_fwd"]:
        lines.append(f"| {r['workload']} | {r['S']} | {r['max_score']:.1f} | {r['max_lse']:.1f} | "
                     f"{r['max_lse_error']:.3g} | {r['lse_atol_needed_at_rtol']:.3g} | {r['lse_error_over_magnitude']:.3g} | "
                     f"{r['o_error_over_o_bound']:.3g} |")
    lines += ["", "## gemm_fp8 and gemm_fp8_blockscale under the same model (worst error / tolerance, 64 sampled "
              "outputs, bf16 output rounding included; promotion every N of K)", "",
              "| task | workload | K | never | 128 | 256 | 512 |", "|---|---|---|---|---|---|---|"]
    for r in result["gemm_fp8"]:
        cells = [_fmt(r[f"error_over_bound_promote_{p}"]) if f"error_over_bound_promote_{p}" in r else "-"
                 for p in ("never", 128, 256, 512)]
        lines.append(f"| {r['task']} | {r['workload']} | {r['K']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--k", type=int, nargs="*", default=list(KS))
    parser.add_argument("--derive-bits", type=int, help="CPU only: attention_fp8_fwd's needs for this many bits")
    parser.add_argument("--truncation", choices=("zero", "down"), default="zero")
    parser.add_argument("--final", choices=("rz", "rn"), default="rz")
    parser.add_argument("--cut", choices=("terms", "sum"), default="terms")
    parser.add_argument("--queries", type=int, default=64, help="--derive-bits: sampled query rows per workload")
    parser.add_argument("--samples", type=int, default=200_000,
                        help="--derive-bits: single scores sampled per kind (ordinary; dominated by a shared outlier)")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="no GPU: write the .md of a results JSON beside it (or to --out if given)")
    args = parser.parse_args()
    if args.render:
        target = (args.out if args.out != OUT else args.render.parent) / args.render.with_suffix(".md").name
        target.write_text(markdown(json.loads(args.render.read_text()), rendered_from=args.render.name))
        print(target)
        return
    if args.derive_bits:
        rows = derive_attention(args.derive_bits, args.truncation, args.final, args.cut, args.queries)
        for row in rows + derive_gemm(args.derive_bits, args.truncation, args.final, args.cut):
            print(json.dumps(row))
        print(json.dumps(derive_scores(args.derive_bits, args.truncation, args.final, args.cut, args.samples)))
        print(derive_summary(rows))
        return
    result = probe(tuple(args.k))
    stem = results_stem(result["gpu"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
