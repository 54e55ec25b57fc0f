"""NumPy models of the add_rmsnorm, silu_mul and rope reference kernels (kernels/reference/sm_90a), checked on the
CPU: what the GPU cannot be asked about here is how each kernel cuts its tensors into units, what its bulk copies
bring into a stage, which thread reads and writes which 16-byte vector, and (rope) its own cos and sin.

Each model reads the kernel's constants from its source (a change there changes the model), plans every workload
of the task the way the kernel's host code does (on an H100's 132 SMs and on a smaller part), and checks that
- the units of the persistent grid cover every output element exactly once;
- every bulk copy's source, destination and size are multiples of 16 bytes, inside the tensor, within the stage,
  and that a stage's copies add up to the bytes its mbarrier is armed with;
- the threads' vector loops cover a unit exactly once;
- the kernel's arithmetic, done in the stage's layout, gives the task's answer under the task's tolerance on the
  task's own inputs (shrunk to a few tokens where a workload is large), and a layout slip (rope's interleaved
  pairs, silu_mul's halves swapped) does not.
What it cannot show: the mbarrier protocol on real hardware, occupancy and speed (`ptxbench eval --gold`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from ptxbench.kernels import reference_folder
from ptxbench.tasks.loader import get_task

REFERENCE = reference_folder("sm_90a")
SMEM_OPTIN = 227 * 1024  # H100 and H200: the most dynamic shared memory one CTA may ask for
SMS = (132, 78)  # an H100 SXM, and a smaller part (more units per SM, another grid)


def constants(stem: str) -> dict[str, int]:
    """The kernel's integer ``constexpr`` constants (``kThreads = 256``, ``kChunk = 4096``, ``64 * 1024``)."""
    source = (REFERENCE / f"{stem}.cu").read_text()
    found = {}
    for name, value in re.findall(r"constexpr (?:int|int64_t|uint32_t) (k\w+) = ([0-9 *]+);", source):
        found[name] = math.prod(int(part) for part in value.split("*"))
    return found


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def resident(smem: int, threads: int, sms: int) -> int:
    """CTAs at once: an SM's 228 KB of shared memory (1 KB reserved per CTA), 2048 threads, at most 32 CTAs."""
    return sms * min(32, 2048 // threads, (228 * 1024) // (smem + 1024))


def cta_units(units: int, grid: int) -> list[np.ndarray]:
    """The units CTA b takes, in order: b, b + G, b + 2G, ... below ``units`` (every kernel's walk)."""
    return [np.arange(b, units, grid) for b in range(grid)]


def vector_loop(nvec: int, threads: int) -> np.ndarray:
    """How many times each 16-byte vector of a unit is visited by ``for (v = tid; v < nvec; v += threads)``."""
    seen = np.zeros(nvec, dtype=np.int64)
    for tid in range(threads):
        seen[np.arange(tid, nvec, threads)] += 1
    return seen


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest, ties to even) and back, as __floats2bfloat162_rn does."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def inputs_of(task_id: str, sizes: dict[str, int], seed: int = 11) -> dict[str, np.ndarray]:
    from ptxbench.tasks.reference import make_inputs

    return {name: tensor.float().numpy() if tensor.is_floating_point() else tensor.numpy()
            for name, tensor in make_inputs(get_task(task_id), sizes, seed=seed).items()}


def passes(task_id: str, sizes: dict[str, int], actual: dict[str, np.ndarray], seed: int = 11) -> list:
    """The task's comparison of these outputs (rounded to bf16 as the kernel stores them) with its reference."""
    torch = pytest.importorskip("torch")
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.reference import make_inputs, run_reference

    task = get_task(task_id)
    inputs = make_inputs(task, sizes, seed=seed)
    expected = run_reference(task, dict(inputs), sizes)
    got = {name: torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)).to(torch.bfloat16)
           for name, value in actual.items()}
    return compare_outputs(task, got, expected)


def shrunk(sizes: dict[str, int], axis: str, most: int) -> dict[str, int]:
    return {**sizes, axis: min(sizes[axis], most)}


# ---- silu_mul -------------------------------------------------------------------------------------------------

SILU = constants("silu_mul")


@dataclass(frozen=True)
class SiluPlan:
    chunk: int
    chunks: int
    stages: int
    smem: int


def silu_plan(T: int, N: int, sms: int) -> SiluPlan:
    """The host code of silu_mul.cu."""
    chunks = ceil_div(N, SILU["kChunk"])
    wanted = ceil_div(2 * sms, T)
    finest = max(1, N // SILU["kMinChunk"])
    if chunks < wanted:
        chunks = min(wanted, finest)
    chunks = max(chunks, ceil_div(N, SILU["kChunk"]))
    chunk = round_up(ceil_div(N, chunks), 64)
    chunks = ceil_div(N, chunk)
    pitch = 4 * chunk
    stages = min(max(SILU["kBytesInFlightPerCta"] // pitch, 2), SILU["kMaxStages"])
    return SiluPlan(chunk, chunks, stages, stages * pitch + 8 * SILU["kMaxStages"])


def silu_unit(plan: SiluPlan, N: int, unit: int) -> tuple[int, int, int]:
    """(row, first column, columns) of a unit, as the kernel's locate()."""
    row, c = divmod(unit, plan.chunks)
    col = c * plan.chunk
    return row, col, min(plan.chunk, N - col)


def silu_values(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The kernel's silu(g) * u: g * u / (1 + 2^(-g log2 e)) in fp32."""
    g, u = g.astype(np.float32), u.astype(np.float32)
    with np.errstate(over="ignore"):
        e = np.exp2(-g * np.float32(1.4426950408889634))
    return (g * u) / (np.float32(1) + e)


def silu_model(X: np.ndarray, N: int, sms: int, swap_halves: bool = False) -> np.ndarray:
    """Y from the units, each staged as the kernel's two bulk copies leave it: gate chunk, then up chunk."""
    T = X.shape[0]
    flat = X.reshape(T, 2 * N)
    plan = silu_plan(T, N, sms)
    Y = np.full((T, N), np.nan, dtype=np.float32)
    for unit in range(T * plan.chunks):
        row, col, length = silu_unit(plan, N, unit)
        stage = np.zeros(2 * plan.chunk, dtype=np.float32)
        gate, up = (row * 2 * N + col, row * 2 * N + N + col)
        stage[:length] = flat.reshape(-1)[gate:gate + length]
        stage[plan.chunk:plan.chunk + length] = flat.reshape(-1)[up:up + length]
        g, u = stage[:length], stage[plan.chunk:plan.chunk + length]
        Y[row, col:col + length] = silu_values(u, g) if swap_halves else silu_values(g, u)
    return Y


SILU_WORKLOADS = [w.sizes for w in get_task("silu_mul").workloads] + [
    {"T": 1, "N": 64}, {"T": 1, "N": 8192}, {"T": 3, "N": 4160}, {"T": 300, "N": 4096 + 64}, {"T": 2, "N": 28672},
    {"T": 2, "N": 28736}, {"T": 17, "N": 1472}, {"T": 5, "N": 512}]


@pytest.mark.parametrize("sms", SMS)
@pytest.mark.parametrize("sizes", SILU_WORKLOADS, ids=lambda s: f"t{s['T']}-n{s['N']}")
def test_silu_mul_units_cover_y_once_with_aligned_copies(sizes: dict[str, int], sms: int) -> None:
    T, N = sizes["T"], sizes["N"]
    plan = silu_plan(T, N, sms)
    assert plan.chunk % 64 == 0 and plan.chunk <= SILU["kChunk"] and 2 <= plan.stages <= SILU["kMaxStages"]
    assert plan.smem <= SMEM_OPTIN
    units = T * plan.chunks
    grid = min(units, resident(plan.smem, SILU["kThreads"], sms))
    taken = np.concatenate(cta_units(units, grid))
    assert np.array_equal(np.sort(taken), np.arange(units))  # every unit to exactly one CTA, once
    covered = np.zeros(N, dtype=np.int64)  # a row's chunks (the same in every row)
    for c in range(plan.chunks):
        row, col, length = silu_unit(plan, N, c)
        assert row == 0 and 0 < length <= plan.chunk and length % 8 == 0
        assert 2 * length * 2 < 1 << 20  # the stage's transaction count
        assert (vector_loop(length // 8, SILU["kThreads"]) == 1).all()
        covered[col:col + length] += 1
        rows = np.arange(T, dtype=np.int64)
        for elements in (rows * 2 * N + col, rows * 2 * N + N + col, rows * N + col):  # gate, up, Y: 16-byte aligned
            assert (elements * 2 % 16 == 0).all()
    assert (covered == 1).all()
    if T >= 2 * sms:
        assert plan.chunks == ceil_div(N, SILU["kChunk"])  # no needless cut at prefill
    elif N >= 2 * SILU["kMinChunk"]:
        assert units >= min(2 * sms, T * (N // SILU["kMinChunk"])) // 2  # decode rows cut to reach the SMs


@pytest.mark.parametrize("sizes", SILU_WORKLOADS, ids=lambda s: f"t{s['T']}-n{s['N']}")
def test_silu_mul_model_gives_the_tasks_answer(sizes: dict[str, int]) -> None:
    sizes = shrunk(sizes, "T", 4)
    X = inputs_of("silu_mul", sizes)["X"]
    for comparison in passes("silu_mul", sizes, {"Y": silu_model(X, sizes["N"], SMS[0])}):
        assert comparison.passed, comparison


def test_silu_mul_with_its_halves_swapped_fails() -> None:
    sizes = {"T": 3, "N": 2880}
    X = inputs_of("silu_mul", sizes)["X"]
    assert not all(c.passed for c in passes("silu_mul", sizes, {"Y": silu_model(X, 2880, SMS[0], swap_halves=True)}))


# ---- add_rmsnorm ----------------------------------------------------------------------------------------------

ADD = constants("add_rmsnorm")


def add_rmsnorm_plan(Hd: int) -> tuple[int, int, int]:
    """(pitch, stages, smem) of add_rmsnorm.cu's host code."""
    pitch = round_up(Hd * 2, 128)
    stages = min(max(ADD["kBytesInFlightPerCta"] // (2 * pitch), 2), ADD["kMaxStages"])
    smem = (2 * stages + 1) * pitch + 8 * (ADD["kMaxStages"] + 1) + 4 * (ADD["kThreads"] // 32)
    return pitch, stages, smem


def add_rmsnorm_model(X: np.ndarray, R: np.ndarray, W: np.ndarray) -> dict[str, np.ndarray]:
    """Pass 1 and pass 2 of the kernel on each row: S = bf16(x + r) (fp32 sum), the sum of squares of the rounded
    S by thread, then warp, then block; Y = (S * inv_rms) * W."""
    T, Hd = X.shape
    threads = ADD["kThreads"]
    Y = np.empty_like(X)
    R_out = np.empty_like(X)
    for row in range(T):
        s = bf16(X[row].astype(np.float32) + R[row].astype(np.float32))
        R_out[row] = s
        vectors = s.reshape(-1, 8)
        per_thread = np.zeros(threads, dtype=np.float32)
        for v in range(vectors.shape[0]):  # thread v % threads owns vector v
            per_thread[v % threads] += np.float32((vectors[v] * vectors[v]).sum(dtype=np.float32))
        total = np.float32(per_thread.reshape(-1, 32).sum(axis=1, dtype=np.float32).sum(dtype=np.float32))
        inv_rms = np.float32(1.0) / np.sqrt(total / np.float32(Hd) + np.float32(1e-6), dtype=np.float32)
        Y[row] = (s * inv_rms) * W
    return {"Y": Y, "R_out": R_out}


ADD_WORKLOADS = [w.sizes for w in get_task("add_rmsnorm").workloads] + [
    {"T": 1, "Hd": 64}, {"T": 2, "Hd": 16384}, {"T": 3, "Hd": 192}, {"T": 129, "Hd": 8256}, {"T": 2, "Hd": 23232}]


@pytest.mark.parametrize("sizes", ADD_WORKLOADS, ids=lambda s: f"t{s['T']}-h{s['Hd']}")
def test_add_rmsnorm_stages_fit_and_rows_are_aligned_single_copies(sizes: dict[str, int]) -> None:
    Hd = sizes["Hd"]
    pitch, stages, smem = add_rmsnorm_plan(Hd)
    assert smem <= SMEM_OPTIN and 2 <= stages <= ADD["kMaxStages"]
    assert Hd * 2 % 16 == 0 and pitch % 128 == 0 and 2 * Hd * 2 < 1 << 20  # one copy per row; the tx count
    assert (vector_loop(Hd // 8, ADD["kThreads"]) == 1).all()
    for sms in SMS:  # every row to exactly one CTA
        grid = min(sizes["T"], resident(smem, ADD["kThreads"], sms))
        rows = np.concatenate(cta_units(sizes["T"], grid))
        assert np.array_equal(np.sort(rows), np.arange(sizes["T"]))


@pytest.mark.parametrize("sizes", ADD_WORKLOADS, ids=lambda s: f"t{s['T']}-h{s['Hd']}")
def test_add_rmsnorm_model_gives_the_tasks_answer(sizes: dict[str, int]) -> None:
    sizes = shrunk(sizes, "T", 6)
    drawn = inputs_of("add_rmsnorm", sizes)
    for comparison in passes("add_rmsnorm", sizes, add_rmsnorm_model(drawn["X"], drawn["R"], drawn["W"])):
        assert comparison.passed, comparison


def test_add_rmsnorm_normalising_the_old_residual_fails() -> None:
    sizes = {"T": 4, "Hd": 896}
    drawn = inputs_of("add_rmsnorm", sizes)
    wrong = add_rmsnorm_model(drawn["X"], drawn["R"], drawn["W"])
    wrong["Y"] = add_rmsnorm_model(drawn["R"], np.zeros_like(drawn["R"]), drawn["W"])["Y"]
    assert not all(c.passed for c in passes("add_rmsnorm", sizes, wrong))


# ---- rope -----------------------------------------------------------------------------------------------------

ROPE_SOURCE = (REFERENCE / "rope.cu").read_text()
ROPE = constants("rope")


def _cos_sin_spec() -> dict:
    """cos_sin's constants, polynomial coefficients (highest first) and quadrant table, from the kernel."""
    body = ROPE_SOURCE[ROPE_SOURCE.index("void cos_sin("):ROPE_SOURCE.index("c_out = float(c);")]
    number = lambda name: float(re.search(rf"{name} = ([-+0-9.e]+);", body)[1])  # noqa: E731
    arithmetic = lambda text: eval(text, {"__builtins__": {}})  # noqa: E731,S307 - literals like -1.0 / 6.0

    def coefficients(var: str) -> list[float]:
        first = re.search(rf"double {var} = ([^;]+);", body)[1]
        rest = re.findall(rf"{var} = fma\({var}, r2, ([^)]+)\);", body)
        return [arithmetic(first)] + [arithmetic(c) for c in rest]

    def quadrants(var: str) -> list[str]:
        match = re.search(rf"const double {var} = quadrant == 0 \? (-?\w+) : quadrant == 1 \? (-?\w+) : "
                          rf"quadrant == 2 \? (-?\w+) : (-?\w+);", body)
        assert match, f"cos_sin's quadrant selection of {var} changed form: update this model"
        return list(match.groups())

    assert "sn = fma(sn * r2, r, r);" in body, "cos_sin's last sine step changed form: update this model"
    return {"two_over_pi": number("kTwoOverPi"), "hi": number("kPiOver2Hi"), "lo": number("kPiOver2Lo"),
            "sin": coefficients("sn"), "cos": coefficients("cs"), "c": quadrants("c"), "s": quadrants("s")}


COS_SIN = _cos_sin_spec()


def cos_sin_model(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos_sin() in float64, step for step (the reduction without fused multiply-adds: 1e-12 rad here)."""
    q = np.rint(a * COS_SIN["two_over_pi"])
    r = (a - q * COS_SIN["hi"]) - q * COS_SIN["lo"]
    r2 = r * r
    sn = np.full_like(r, COS_SIN["sin"][0])
    for c in COS_SIN["sin"][1:]:
        sn = sn * r2 + c
    sn = sn * r2 * r + r
    cs = np.full_like(r, COS_SIN["cos"][0])
    for c in COS_SIN["cos"][1:]:
        cs = cs * r2 + c
    quadrant = q.astype(np.int64) & 3
    terms = {"sn": sn, "-sn": -sn, "cs": cs, "-cs": -cs}
    pick = lambda names: np.choose(quadrant, [terms[n] for n in names])  # noqa: E731
    return pick(COS_SIN["c"]).astype(np.float32), pick(COS_SIN["s"]).astype(np.float32)


def inverse_frequencies(D: int, theta: int) -> np.ndarray:
    return np.exp2(-(2.0 * np.arange(D // 2) / D) * np.log2(float(theta)))


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("theta", [10000, 500000, 1000000])
def test_rope_cos_and_sin_are_accurate_at_every_position(D: int, theta: int) -> None:
    positions = np.arange(32768, dtype=np.float64)
    angles = positions[:, None] * inverse_frequencies(D, theta)[None, :]
    c, s = cos_sin_model(angles)
    assert np.abs(c - np.cos(angles)).max() < 1e-7 and np.abs(s - np.sin(angles)).max() < 1e-7  # fp32 rounding


@dataclass(frozen=True)
class RopePlan:
    hpu: int
    runs: int
    stages: int
    smem: int


def rope_plan(T: int, Hq: int, Hkv: int, D: int, sms: int) -> RopePlan:
    """The host code of rope.cu."""
    H, head_bytes = Hq + Hkv, D * 2
    most = ROPE["kMaxStageBytes"] // head_bytes
    runs = ceil_div(H, most)
    wanted = ceil_div(2 * sms, T)
    if runs < wanted:
        runs = min(wanted, H)
    hpu = ceil_div(H, runs)
    runs = ceil_div(H, hpu)
    pitch = round_up(hpu * head_bytes, 128)
    stages = min(max(ROPE["kBytesInFlightPerCta"] // pitch, 2), ROPE["kMaxStages"])
    table = 4 * ROPE["kMaxHalf"] * 4
    return RopePlan(hpu, runs, stages, stages * pitch + table + 8 * ROPE["kMaxStages"])


def rope_unit(plan: RopePlan, H: int, unit: int) -> tuple[int, int, int]:
    """(token, first head-row, head-rows) of a unit, as the kernel's locate()."""
    t, run = divmod(unit, plan.runs)
    h0 = run * plan.hpu
    return t, h0, min(plan.hpu, H - h0)


def rope_copies(t: int, h0: int, nh: int, Hq: int, Hkv: int, D: int) -> list[tuple[str, int, int, int]]:
    """The unit's bulk copies as issue_unit() makes them: (tensor, source element, stage element, elements)."""
    copies = []
    if h0 < Hq:
        q_end = min(h0 + nh, Hq)
        copies.append(("Q", (t * Hq + h0) * D, 0, (q_end - h0) * D))
    if h0 + nh > Hq:
        k_begin = max(h0, Hq)
        copies.append(("K", (t * Hkv + (k_begin - Hq)) * D, (k_begin - h0) * D, (h0 + nh - k_begin) * D))
    return copies


def rope_threads(nh: int, D: int) -> np.ndarray:
    """How many times each (head-row, vector) of a unit is handled: thread tid takes vector tid % (D / 16) of
    head-rows tid / (D / 16), + kThreads / (D / 16), ..."""
    vecs, threads = D // 16, ROPE["kThreads"]
    seen = np.zeros((nh, vecs), dtype=np.int64)
    for tid in range(threads):
        for hl in range(tid // vecs, nh, threads // vecs):
            seen[hl, tid % vecs] += 1
    return seen


ROPE_WORKLOADS = [w.sizes for w in get_task("rope").workloads] + [
    {"T": 1, "Hq": 1, "Hkv": 1, "D": 64, "theta": 10000}, {"T": 2, "Hq": 5, "Hkv": 3, "D": 128, "theta": 10000},
    {"T": 5, "Hq": 128, "Hkv": 8, "D": 128, "theta": 1000000},
    {"T": 1, "Hq": 200, "Hkv": 100, "D": 64, "theta": 500000},
    {"T": 300, "Hq": 200, "Hkv": 100, "D": 64, "theta": 500000},
    {"T": 64, "Hq": 30, "Hkv": 7, "D": 128, "theta": 500000}]


def _rope_id(s: dict[str, int]) -> str:
    return f"t{s['T']}-q{s['Hq']}-k{s['Hkv']}-d{s['D']}"


@pytest.mark.parametrize("sms", SMS)
@pytest.mark.parametrize("sizes", ROPE_WORKLOADS, ids=_rope_id)
def test_rope_units_cover_every_head_once_with_aligned_copies(sizes: dict[str, int], sms: int) -> None:
    T, Hq, Hkv, D = sizes["T"], sizes["Hq"], sizes["Hkv"], sizes["D"]
    H = Hq + Hkv
    plan = rope_plan(T, Hq, Hkv, D, sms)
    assert plan.smem <= SMEM_OPTIN and 2 <= plan.stages <= ROPE["kMaxStages"] and D // 2 <= ROPE["kMaxHalf"]
    assert ROPE["kThreads"] % (D // 16) == 0
    units = T * plan.runs
    grid = min(units, resident(plan.smem, ROPE["kThreads"], sms))
    taken = np.concatenate(cta_units(units, grid))
    assert np.array_equal(np.sort(taken), np.arange(units))  # every unit to exactly one CTA, once
    tokens = np.arange(T, dtype=np.int64)
    covered = {"Q": np.zeros((T, Hq * D), dtype=np.int64), "K": np.zeros((T, Hkv * D), dtype=np.int64)}
    for run in range(plan.runs):  # a token's runs (the same in every token)
        t, h0, nh = rope_unit(plan, H, run)
        assert t == 0 and 0 < nh <= plan.hpu
        assert (rope_threads(nh, D) == 1).all()
        staged = np.zeros(plan.hpu * D, dtype=np.int64)
        for tensor, source, stage, elements in rope_copies(0, h0, nh, Hq, Hkv, D):
            assert stage * 2 % 16 == 0 and elements * 2 % 16 == 0 and elements > 0
            heads = Hq if tensor == "Q" else Hkv
            assert (((tokens * heads * D) + source) * 2 % 16 == 0).all()  # every token's source is aligned
            covered[tensor][:, source:source + elements] += 1  # source is token 0's: the row offset
            staged[stage:stage + elements] += 1
        assert (staged[:nh * D] == 1).all() and not staged[nh * D:].any()  # = the expect_tx of the stage
    assert (covered["Q"] == 1).all() and (covered["K"] == 1).all()
    if T >= 2 * sms:  # a prefill token is one unit, or as few as its bytes need
        assert plan.runs == ceil_div(H * D * 2, (ROPE["kMaxStageBytes"] // (D * 2)) * D * 2)


def rope_model(Q: np.ndarray, K: np.ndarray, positions: np.ndarray, theta: int, interleaved: bool = False
               ) -> dict[str, np.ndarray]:
    """Q_out and K_out from the units: stage the run's heads as the copies leave them, rotate head-row hl with
    the first-half vector j and its second-half partner D / 2 elements on, with the unit's cos/sin table."""
    T, Hq, D = Q.shape
    Hkv, half = K.shape[1], D // 2
    plan = rope_plan(T, Hq, Hkv, D, SMS[0])
    inv_freq = inverse_frequencies(D, theta)
    out = {"Q": np.full(Q.shape, np.nan, dtype=np.float32), "K": np.full(K.shape, np.nan, dtype=np.float32)}
    source = {"Q": Q.reshape(-1), "K": K.reshape(-1)}
    for unit in range(T * plan.runs):
        t, h0, nh = rope_unit(plan, Hq + Hkv, unit)
        stage = np.zeros(plan.hpu * D, dtype=np.float32)
        for tensor, start, at, elements in rope_copies(t, h0, nh, Hq, Hkv, D):
            stage[at:at + elements] = source[tensor][start:start + elements]
        c, s = cos_sin_model(float(positions[t]) * inv_freq)
        heads = stage[:nh * D].reshape(nh, D)
        if interleaved:  # the GPT-J layout: pair 2i with 2i + 1 (what the task does not ask for)
            a, b = heads[:, 0::2], heads[:, 1::2]
            rotated = np.empty_like(heads)
            rotated[:, 0::2], rotated[:, 1::2] = a * c - b * s, b * c + a * s
        else:
            a, b = heads[:, :half], heads[:, half:]
            rotated = np.concatenate((a * c - b * s, b * c + a * s), axis=1)
        for hl in range(nh):
            h = h0 + hl
            if h < Hq:
                out["Q"][t, h] = rotated[hl]
            else:
                out["K"][t, h - Hq] = rotated[hl]
    return {"Q_out": out["Q"], "K_out": out["K"]}


@pytest.mark.parametrize("sizes", ROPE_WORKLOADS, ids=_rope_id)
def test_rope_model_gives_the_tasks_answer(sizes: dict[str, int]) -> None:
    sizes = shrunk(sizes, "T", 96)
    drawn = inputs_of("rope", sizes)
    actual = rope_model(drawn["Q"], drawn["K"], drawn["positions"], sizes["theta"])
    for comparison in passes("rope", sizes, actual):
        assert comparison.passed, comparison


def test_rope_positions_reach_far_and_the_interleaved_layout_fails() -> None:
    sizes = {"T": 64, "Hq": 4, "Hkv": 2, "D": 128, "theta": 500000}
    drawn = inputs_of("rope", sizes)
    assert drawn["positions"].max() > 4096  # the drawn runs start far into a sequence: large angles are tested
    wrong = rope_model(drawn["Q"], drawn["K"], drawn["positions"], sizes["theta"], interleaved=True)
    assert not all(c.passed for c in passes("rope", sizes, wrong))
