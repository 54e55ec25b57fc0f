"""The serving-path attention tasks (paged decode, ragged prefill, fp8): each reference, on the CPU at small
sizes, against an independent float64 computation written per sequence and per query with explicit loops."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.judgement.compare import compare  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.model import Tolerance  # noqa: E402
from ptxbench.tasks.reference import _namespace, make_inputs, run_reference  # noqa: E402

CLOSE = Tolerance(rtol=1e-5, atol=1e-5)


def _assert_close(name, actual, expected, tol=CLOSE):  # type: ignore[no-untyped-def]
    result = compare(name, actual, expected, tol)
    assert result.passed, result


def _softmax_row(scores):  # type: ignore[no-untyped-def]
    """Float64 softmax weights and natural-log LSE of one row, the textbook way."""
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [w / total for w in weights], top + math.log(total)


def _paged_layout(lengths: list[int], page_size: int, pool: int, seed: int):  # type: ignore[no-untyped-def]
    """FlashInfer-style indptr / indices / last_page_len for given lengths, pages scattered in the pool."""
    g = torch.Generator().manual_seed(seed)
    counts = [-(-n // page_size) for n in lengths]
    pages = torch.randperm(pool, generator=g)[: sum(counts)]
    indptr = [0]
    for c in counts:
        indptr.append(indptr[-1] + c)
    last = [n - (c - 1) * page_size for n, c in zip(lengths, counts)]
    as_int = lambda values: torch.tensor(values, dtype=torch.int32)  # noqa: E731
    return as_int(indptr), pages.to(torch.int32), as_int(last)


def test_decode_reference_against_a_per_key_float64_loop() -> None:
    task = get_task("decode_gqa_paged")
    lengths, page_size, heads, kv_heads, dim = [1, 17, 40], 16, 4, 2, 128
    indptr, indices, last = _paged_layout(lengths, page_size, pool=7, seed=0)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, heads, dim, generator=g).bfloat16()
    k_cache = torch.randn(7, page_size, kv_heads, dim, generator=g).bfloat16()
    v_cache = torch.randn(7, page_size, kv_heads, dim, generator=g).bfloat16()
    sizes = {"B": 3, "H": heads, "KH": kv_heads, "P": page_size, "NP": 7, "L": sum(lengths)}
    inputs = {"Q": q, "K_cache": k_cache, "V_cache": v_cache, "kv_indptr": indptr, "kv_indices": indices,
              "kv_last_page_len": last}
    result = run_reference(task, inputs, sizes)
    assert result["O"].shape == (3, heads, dim) and result["LSE"].shape == (3, heads)
    want_o = torch.zeros(3, heads, dim, dtype=torch.float64)
    want_lse = torch.zeros(3, heads, dtype=torch.float64)
    for b, n in enumerate(lengths):
        # key t of sequence b: page indices[indptr[b] + t // P], slot t % P
        rows = [(int(indices[int(indptr[b]) + t // page_size]), t % page_size) for t in range(n)]
        for h in range(heads):
            kv = h // (heads // kv_heads)
            qd = q[b, h].double()
            scores = [float(k_cache[p, s, kv].double() @ qd) / math.sqrt(dim) for p, s in rows]
            weights, want_lse[b, h] = _softmax_row(scores)
            for w, (p, s) in zip(weights, rows):
                want_o[b, h] += w * v_cache[p, s, kv].double()
    _assert_close("O", result["O"], want_o)
    _assert_close("LSE", result["LSE"], want_lse)
    assert (result["O_magnitude"] >= result["O"].abs() - 1e-6).all()


def test_decode_layouts_are_valid_mixed_and_drawn_per_trial() -> None:
    task = get_task("decode_gqa_paged")
    sizes = {"B": 5, "H": 4, "KH": 2, "P": 16, "NP": 40, "L": 601}
    first, second = (make_inputs(task, sizes, seed=s) for s in (3, 4))
    for inputs in (first, second):
        indptr, indices, last = inputs["kv_indptr"], inputs["kv_indices"], inputs["kv_last_page_len"]
        assert indptr.dtype == indices.dtype == last.dtype == torch.int32
        counts = (indptr[1:] - indptr[:-1]).long()
        assert int(indptr[0]) == 0 and int(indptr[-1]) == 40 and (counts >= 1).all()
        assert sorted(indices.tolist()) == list(range(40))
        assert ((last >= 1) & (last <= 16)).all()
        lengths = (counts - 1) * 16 + last.long()
        assert int(lengths.sum()) == 601 and len(set(lengths.tolist())) > 1
    assert not torch.equal(first["kv_indices"], second["kv_indices"])
    again = make_inputs(task, sizes, seed=3)
    assert all(torch.equal(first[n], again[n]) for n in ("kv_indptr", "kv_indices", "kv_last_page_len"))


def test_every_decode_workload_has_a_consistent_layout() -> None:
    """NP pages and L keys must be reachable (every sequence a page, last pages 1..P full)."""
    task = get_task("decode_gqa_paged")
    derive = _namespace(task)["derive_inputs"]
    for workload in task.workloads:
        sizes = workload.sizes
        q = torch.zeros(sizes["B"], sizes["H"], 128, dtype=torch.bfloat16)
        layout = derive(Q=q, K_cache=None, V_cache=None, **sizes)
        counts = (layout["kv_indptr"][1:] - layout["kv_indptr"][:-1]).long()
        assert int(((counts - 1) * sizes["P"] + layout["kv_last_page_len"].long()).sum()) == sizes["L"], workload.name
    with pytest.raises(ValueError, match="inconsistent sizes"):
        derive(Q=torch.zeros(2, 4, 128), K_cache=None, V_cache=None, B=2, H=4, KH=2, P=16, NP=3, L=100)


def test_prefill_reference_against_a_per_query_float64_loop() -> None:
    task = get_task("prefill_gqa_ragged")
    sizes = {"B": 3, "S": 40, "DS": 17, "T": 69, "H": 4, "KH": 2}  # lengths 40, 23, 6 in a drawn order
    inputs = dict(make_inputs(task, sizes, seed=5))
    bounds = inputs["seq_indptr"].tolist()
    assert bounds[0] == 0 and bounds[-1] == 69
    assert sorted(e - s for s, e in zip(bounds[:-1], bounds[1:])) == [6, 23, 40]
    result = run_reference(task, inputs, sizes)
    q, k, v = (inputs[n].double() for n in ("Q", "K", "V"))
    want_o = torch.zeros(69, 4, 128, dtype=torch.float64)
    want_lse = torch.zeros(69, 4, dtype=torch.float64)
    for start, end in zip(bounds[:-1], bounds[1:]):
        for i in range(start, end):
            for h in range(4):
                kv = h // 2
                scores = [float(q[i, h] @ k[j, kv]) / math.sqrt(128) for j in range(start, i + 1)]
                weights, want_lse[i, h] = _softmax_row(scores)
                want_o[i, h] = sum(w * v[j, kv] for w, j in zip(weights, range(start, i + 1)))
    _assert_close("O", result["O"], want_o)
    _assert_close("LSE", result["LSE"], want_lse)
    assert (result["O_magnitude"] >= result["O"].abs() - 1e-6).all()


def test_prefill_order_follows_the_draw_and_every_workload_is_consistent() -> None:
    task = get_task("prefill_gqa_ragged")
    sizes = {"B": 6, "S": 11, "DS": 2, "T": 36, "H": 2, "KH": 1}
    orders = {tuple(make_inputs(task, sizes, seed=s)["seq_indptr"].tolist()) for s in range(6)}
    assert len(orders) > 1
    derive = _namespace(task)["derive_inputs"]
    for workload in task.workloads:
        s = workload.sizes
        indptr = derive(Q=torch.zeros(1, 1, 8, dtype=torch.bfloat16), K=None, V=None, **s)["seq_indptr"]
        assert int(indptr[-1]) == s["T"] and len(indptr) == s["B"] + 1, workload.name
        assert task.flops_for(s) == pytest.approx(sum(4 * s["H"] * 128 * n * (n + 1) / 2 for n in
                                                      (s["S"] - b * s["DS"] for b in range(s["B"]))))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        derive(Q=torch.zeros(1, 1, 8), K=None, V=None, B=3, S=10, DS=5, T=15, H=2, KH=1)


@pytest.mark.parametrize("causal", [0, 1])
def test_fp8_reference_against_a_per_query_float64_loop(causal: int) -> None:
    task = get_task("attention_fp8_fwd")
    sizes = {"B": 1, "H": 2, "S": 64, "causal": causal}
    inputs = make_inputs(task, sizes, seed=7)
    assert inputs["Q"].dtype == torch.float8_e4m3fn and float(inputs["descale_q"]) > 0
    result = run_reference(task, dict(inputs), sizes)
    scale = float(inputs["descale_q"]) * float(inputs["descale_k"]) / math.sqrt(128)
    q, k = inputs["Q"].double(), inputs["K"].double()
    v = inputs["V"].double() * float(inputs["descale_v"])
    want_o, want_lse = torch.zeros(1, 2, 64, 128, dtype=torch.float64), torch.zeros(1, 2, 64, dtype=torch.float64)
    for h in range(2):
        for i in range(64):
            keys = range(i + 1) if causal else range(64)
            weights, want_lse[0, h, i] = _softmax_row([float(q[0, h, i] @ k[0, h, j]) * scale for j in keys])
            want_o[0, h, i] = sum(w * v[0, h, j] for w, j in zip(weights, keys))
    _assert_close("O", result["O"], want_o)
    _assert_close("LSE", result["LSE"], want_lse)


@pytest.mark.parametrize("causal", [0, 1])
def test_fp8_tolerance_accepts_e4m3_probabilities_and_rejects_zeros(causal: int) -> None:
    """What an fp8 kernel does (P rounded to e4m3 before P·V, output in bf16) passes; an all-zero output
    and one off by 10 % do not."""
    task = get_task("attention_fp8_fwd")
    sizes = {"B": 1, "H": 2, "S": 512, "causal": causal}
    inputs = make_inputs(task, sizes, seed=8)
    expected = run_reference(task, dict(inputs), sizes)
    scale = float(inputs["descale_q"]) * float(inputs["descale_k"]) / math.sqrt(128)
    scores = inputs["Q"].float() @ inputs["K"].float().transpose(-1, -2) * scale
    if causal:
        scores = scores.masked_fill(torch.ones(512, 512, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(scores - scores.amax(-1, keepdim=True))
    p8 = p.to(torch.float8_e4m3fn).float()
    fp8_out = (p8 @ inputs["V"].float()) * float(inputs["descale_v"]) / p.sum(-1, keepdim=True)
    outputs = {"LSE": expected["LSE"]}
    from ptxbench.evaluate.judgement.compare import compare_outputs

    passed = compare_outputs(task, {**outputs, "O": fp8_out.bfloat16()}, expected)
    assert all(c.passed for c in passed), passed
    assert not compare_outputs(task, {**outputs, "O": torch.zeros_like(fp8_out)}, expected)[0].passed
    assert not compare_outputs(task, {**outputs, "O": expected["O"] * 1.1}, expected)[0].passed
