"""MLA decode over a paged latent cache: the reference, on the CPU at small sizes, against an independent
float64 computation that walks each sequence token by token through its pages; the derived layouts and
scales; and the baselines against the reference (the CUTLASS kernel through a CPU stand-in of its contract)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.baselines import mla as baselines_mla  # noqa: E402
from ptxbench.evaluate.judgement.compare import compare, compare_outputs  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.model import Tolerance  # noqa: E402
from ptxbench.tasks.reference import _namespace, make_inputs, run_reference  # noqa: E402

CLOSE = Tolerance(rtol=1e-5, atol=1e-5)
TASK = get_task("mla_decode_paged")


def _assert_close(name, actual, expected, tol=CLOSE):  # type: ignore[no-untyped-def]
    result = compare(name, actual, expected, tol)
    assert result.passed, result


def _layout(lengths: list[int], page_size: int, pool: int, seed: int):  # type: ignore[no-untyped-def]
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


@pytest.mark.parametrize("page_size", [1, 16])
def test_reference_against_a_per_token_float64_walk_over_the_pages(page_size: int) -> None:
    lengths, heads = [1, 17, 40], 4
    pool = sum(-(-n // page_size) for n in lengths) + 2  # two pages no sequence owns
    indptr, indices, last = _layout(lengths, page_size, pool, seed=0)
    g = torch.Generator().manual_seed(1)
    q_nope = torch.randn(3, heads, 512, generator=g).bfloat16()
    q_pe = torch.randn(3, heads, 64, generator=g).bfloat16()
    ckv = torch.randn(pool, page_size, 512, generator=g).bfloat16()
    kpe = torch.randn(pool, page_size, 64, generator=g).bfloat16()
    scale = torch.tensor([0.1352], dtype=torch.float32)
    sizes = {"B": 3, "H": heads, "P": page_size, "NP": pool, "L": sum(lengths)}
    inputs = {"q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv, "kpe_cache": kpe, "kv_indptr": indptr,
              "kv_indices": indices, "kv_last_page_len": last, "sm_scale": scale}
    result = run_reference(TASK, inputs, sizes)
    assert result["output"].shape == (3, heads, 512) and result["lse"].shape == (3, heads)
    want_out = torch.zeros(3, heads, 512, dtype=torch.float64)
    want_lse = torch.zeros(3, heads, dtype=torch.float64)
    for b in range(3):
        tokens = []  # (page, slot) of every token, page after page, the last one partly filled
        for i in range(int(indptr[b]), int(indptr[b + 1])):
            fill = int(last[b]) if i == int(indptr[b + 1]) - 1 else page_size
            tokens += [(int(indices[i]), slot) for slot in range(fill)]
        assert len(tokens) == lengths[b]
        for h in range(heads):
            qn, qp = q_nope[b, h].double(), q_pe[b, h].double()
            scores = [(float(qn @ ckv[p, s].double()) + float(qp @ kpe[p, s].double())) * float(scale)
                      for p, s in tokens]
            top = max(scores)
            weights = [math.exp(x - top) for x in scores]
            total = sum(weights)
            want_lse[b, h] = top + math.log(total)
            for w, (p, s) in zip(weights, tokens):
                want_out[b, h] += (w / total) * ckv[p, s].double()
    _assert_close("output", result["output"], want_out)
    _assert_close("lse", result["lse"], want_lse)
    assert (result["output_magnitude"] >= result["output"].abs() - 1e-6).all()


def test_layouts_and_scales_are_valid_mixed_and_drawn_per_trial() -> None:
    sizes = {"B": 5, "H": 8, "P": 16, "NP": 40, "L": 601}
    draws = [make_inputs(TASK, sizes, seed=s) for s in range(8)]
    scales = _namespace(TASK)["SCALES"]
    for inputs in draws:
        indptr, indices, last = inputs["kv_indptr"], inputs["kv_indices"], inputs["kv_last_page_len"]
        assert indptr.dtype == indices.dtype == last.dtype == torch.int32
        counts = (indptr[1:] - indptr[:-1]).long()
        assert int(indptr[0]) == 0 and int(indptr[-1]) == 40 and (counts >= 1).all()
        assert sorted(indices.tolist()) == list(range(40))
        assert ((last >= 1) & (last <= 16)).all()
        lengths = (counts - 1) * 16 + last.long()
        assert int(lengths.sum()) == 601 and len(set(lengths.tolist())) > 1
        assert inputs["sm_scale"].dtype == torch.float32
        assert float(inputs["sm_scale"]) in [pytest.approx(s) for s in scales]
    assert not torch.equal(draws[0]["kv_indices"], draws[1]["kv_indices"])
    assert len({float(d["sm_scale"]) for d in draws}) == 2, "both of DeepSeek-V3's scales are drawn"
    again = make_inputs(TASK, sizes, seed=0)
    assert all(torch.equal(draws[0][n], again[n]) for n in ("kv_indptr", "kv_indices", "kv_last_page_len", "sm_scale"))


def test_every_workload_has_a_consistent_layout_and_deepseek_shapes() -> None:
    derive = _namespace(TASK)["derive_inputs"]
    for workload in TASK.workloads:
        sizes = workload.sizes
        q = torch.zeros(sizes["B"], sizes["H"], 512, dtype=torch.bfloat16)
        layout = derive(q_nope=q, q_pe=None, ckv_cache=None, kpe_cache=None, **sizes)
        counts = (layout["kv_indptr"][1:] - layout["kv_indptr"][:-1]).long()
        assert int(((counts - 1) * sizes["P"] + layout["kv_last_page_len"].long()).sum()) == sizes["L"], workload.name
        assert 128 % sizes["H"] == 0, workload.name  # 128 heads, or 128 split over GPUs
    assert {w.sizes["P"] for w in TASK.shown()} == {64}
    assert {w.sizes["P"] for w in TASK.held_out()} >= {1, 16}, "page sizes of 1 and 16 are held out"
    assert {w.sizes["H"] for w in TASK.held_out()} - {w.sizes["H"] for w in TASK.shown()}, "a head count is held out"
    with pytest.raises(ValueError, match="inconsistent sizes"):
        derive(q_nope=torch.zeros(2, 8, 512), q_pe=None, ckv_cache=None, kpe_cache=None, B=2, H=8, P=16, NP=3, L=100)


def test_tolerance_accepts_bf16_probabilities_and_rejects_zeros_and_a_wrong_scale() -> None:
    sizes = {"B": 3, "H": 8, "P": 16, "NP": 12, "L": 150}
    inputs = make_inputs(TASK, sizes, seed=2)
    expected = run_reference(TASK, dict(inputs), sizes)
    # what a tensor-core kernel does: P rounded to bf16 before P·C, the output rounded to bf16
    padded = baselines_mla.mla_decode_padded(inputs, sizes)()
    assert all(c.passed for c in compare_outputs(TASK, padded, expected))
    zeros = {"output": torch.zeros_like(padded["output"]), "lse": expected["lse"]}
    assert not compare_outputs(TASK, zeros, expected)[0].passed
    other = dict(inputs, sm_scale=inputs["sm_scale"] * 1.25)  # a kernel that ignores the given scale
    wrong = run_reference(TASK, other, sizes)
    assert not all(c.passed for c in compare_outputs(TASK, {"output": wrong["output"], "lse": wrong["lse"]}, expected))


def _efficient_on_cpu(q, k, v, bias, cum_q, cum_k, max_q, max_k,  # type: ignore[no-untyped-def]
                      dropout, mask_type, lse_wanted, scale=None):
    """PyTorch's memory-efficient kernel's contract in float math: [1, M, heads, Dk] queries and keys over
    cu_seqlens, value dim of its own; output [1, M, heads, Dv]; LSE [sequences, heads, max_q rounded up to 32]."""
    assert q.shape[0] == k.shape[0] == v.shape[0] == 1 and bias is None and mask_type == 0 and lse_wanted
    heads = q.shape[2]
    out = torch.zeros(1, q.shape[1], heads, v.shape[-1], dtype=q.dtype)
    lse = torch.full((len(cum_q) - 1, heads, -(-max_q // 32) * 32), float("inf"))
    for s in range(len(cum_q) - 1):
        qs, ks = slice(int(cum_q[s]), int(cum_q[s + 1])), slice(int(cum_k[s]), int(cum_k[s + 1]))
        for h in range(heads):
            scores = q[0, qs, h].float() @ k[0, ks, h].float().T * scale
            row = torch.logsumexp(scores, -1)
            out[0, qs, h] = (torch.exp(scores - row[:, None]) @ v[0, ks, h].float()).to(q.dtype)
            lse[s, h, : row.numel()] = row
    return out, lse, torch.empty(()), torch.empty(()), max_q, max_k


@pytest.mark.parametrize("variant", ["efficient_varlen", "cublas_padded"])
@pytest.mark.parametrize("sizes", [{"B": 3, "H": 8, "P": 16, "NP": 12, "L": 150},
                                   {"B": 4, "H": 16, "P": 1, "NP": 37, "L": 37}], ids=["p16", "p1"])
def test_baselines_match_the_reference(variant: str, sizes: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    from ptxbench.evaluate.baselines.variants import variants_for

    monkeypatch.setattr(torch.ops.aten, "_efficient_attention_forward", _efficient_on_cpu)
    inputs = make_inputs(TASK, sizes, seed=4)
    expected = run_reference(TASK, dict(inputs), sizes)
    outputs = variants_for(TASK.id)[variant].setup(inputs, sizes)()
    assert outputs["output"].dtype == torch.bfloat16 and outputs["output"].shape == (sizes["B"], sizes["H"], 512)
    comparisons = compare_outputs(TASK, outputs, expected)
    assert all(c.passed for c in comparisons), comparisons
