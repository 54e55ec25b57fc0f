"""cuDNN's own fp8 attention as a baseline, through the cuDNN frontend's Python graph API (PyPI
nvidia-cudnn-frontend, import name ``cudnn``), where installed: the serving-grade library path for fp8 (e4m3)
attention on Hopper that the task asks to be measured against, rather than cuDNN's bf16 kernel on widened
inputs (the ``cudnn`` variant, through PyTorch's SDPA).

The graph is one ``pygraph.sdpa_fp8`` node, built in setup for the workload's shape and mask (and kept per
process, by shape, strides, mask and device: building it runs cuDNN's heuristics and compiles the plan). Q, K
and V are declared with the task's own [B, H, S, D] dims and strides, so the e4m3 tensors go in as they are;
the task's one-element descale_q/k/v are the node's descales as they are too (fp32 [1, 1, 1, 1] in device
memory). O is declared bf16 with scale_o = 1 (cuDNN's fp8 forward writes a 16-bit O unquantised; its amax_o, a
one-element fp32 output the node produces beside O, goes to a scratch tensor of setup's). P is quantised to
e4m3 inside the kernel with scale_s = 448 and descale_s = 1/448: the frontend's docstring of ``sdpa_fp8`` says
to set scale_s from the bound of S (448 for e4m3 without dropout) and to leave the deprecated amax_s virtual;
the two cancel, so only P's rounding depends on them. ``generate_stats=True`` returns the softmax stats,
[B, H, S, 1] fp32, the natural-log log-sum-exp of the scores with the softmax scale and both descales
applied (``stats_use_log2`` is left off): the task's LSE, returned as a [B, H, S] view. The causal mask is
``diagonal_alignment=TOP_LEFT`` with ``right_bound=0`` (key j visible to query i when j <= i; queries =
keys, so top-left is the task's alignment).

What is timed: pointing the handle at the caller's current torch stream (a no-op once it is that stream),
O's and the stats' allocation, and ``execute`` of the built plan. The handle is the frontend's own
(``cudnn.create_handle()``), passed to the graph and to ``execute`` so that neither needs cuda-python; the
frontend imports without its declared CuTe-DSL dependencies (nvidia-cutlass-dsl, apache-tvm-ffi), which serve
only its Python kernels, none of which runs fp8 attention on sm_90. The frontend loads libcudnn itself
(``LD_LIBRARY_PATH`` first, then the interpreter's site-packages' nvidia/cudnn, then ``libcudnn.so.9`` by
name); setup refuses to run when the version it loaded is not the one PyTorch reports, so the baseline is
PyTorch's cuDNN (nvidia-cudnn-cu13). Nothing here imports torch or cudnn at module level.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ptxbench.evaluate.baselines.calls import Outputs, Tensors, TimedCall, warmed

# Only the frontend provides this module (``cudnn`` is its package; PyTorch's is torch.backends.cudnn): the
# graph class ``cudnn.pygraph`` lives in it.
REQUIRES = ("cudnn._pygraph",)
E4M3_MAX = 448.0  # scale_s: P <= 1 mapped onto e4m3's range, as the frontend's sdpa_fp8 docstring says

_GRAPHS: dict[tuple[Any, ...], "_Built"] = {}  # this process's built graphs
_HANDLES: dict[Any, Any] = {}  # one frontend handle per device


class _Built:
    """A built sdpa_fp8 graph with its declared tensors, workspace and amax_o scratch."""

    def __init__(self, graph: Any, tensors: dict[str, Any], workspace: Any, amax_o: Any, scales: dict[str, Any]):
        self.graph, self.tensors, self.workspace, self.amax_o, self.scales = graph, tensors, workspace, amax_o, scales


def _handle(device: Any) -> Any:
    import cudnn

    if device not in _HANDLES:
        _HANDLES[device] = cudnn.create_handle()
    return _HANDLES[device]


def _check_library() -> None:
    """The frontend must drive the libcudnn PyTorch ships, not another one found first on the library path."""
    import torch

    import cudnn

    loaded, torch_cudnn = cudnn.backend_version(), torch.backends.cudnn.version()
    if loaded != torch_cudnn:
        raise RuntimeError(f"the cuDNN frontend loaded libcudnn {loaded}, not PyTorch's ({torch_cudnn}): "
                           "unset LD_LIBRARY_PATH's other cuDNN or import torch first")


def _build(q8: Any, k8: Any, v8: Any, causal: bool, handle: Any) -> _Built:
    import torch

    import cudnn

    batch, heads, seq, dim = q8.shape
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    tensors = {name: graph.tensor(name=name, dim=list(x.shape), stride=list(x.stride()),
                                  data_type=cudnn.data_type.FP8_E4M3)
               for name, x in (("Q", q8), ("K", k8), ("V", v8))}
    for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
        tensors[name] = graph.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1],
                                     data_type=cudnn.data_type.FLOAT)
    mask = {"diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT, "right_bound": 0} if causal else {}
    o, stats, _amax_s, amax_o = graph.sdpa_fp8(
        q=tensors["Q"], k=tensors["K"], v=tensors["V"], descale_q=tensors["descale_q"],
        descale_k=tensors["descale_k"], descale_v=tensors["descale_v"], descale_s=tensors["descale_s"],
        scale_s=tensors["scale_s"], scale_o=tensors["scale_o"], generate_stats=True,
        attn_scale=1.0 / math.sqrt(dim), name="sdpa_fp8", **mask)
    o.set_output(True).set_dim([batch, heads, seq, dim]).set_stride([heads * seq * dim, seq * dim, dim, 1]) \
        .set_data_type(cudnn.data_type.BFLOAT16)
    stats.set_output(True).set_dim([batch, heads, seq, 1]).set_stride([heads * seq, seq, 1, 1]) \
        .set_data_type(cudnn.data_type.FLOAT)
    amax_o.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    tensors.update(O=o, Stats=stats, Amax_O=amax_o)  # amax_s stays virtual (deprecated; see the docstring)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    device = q8.device
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=device)
    scales = {name: torch.full((1, 1, 1, 1), value, dtype=torch.float32, device=device)
              for name, value in (("descale_s", 1.0 / E4M3_MAX), ("scale_s", E4M3_MAX), ("scale_o", 1.0))}
    return _Built(graph, tensors, workspace, torch.empty(1, 1, 1, 1, dtype=torch.float32, device=device), scales)


def attention_fp8_fwd(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """cuDNN's fp8 SDPA forward on the e4m3 Q, K, V in place: bf16 O and the natural-log LSE (its stats)."""
    import torch

    import cudnn

    _check_library()
    q8, k8, v8 = inputs["Q"], inputs["K"], inputs["V"]
    batch, heads, seq, dim = q8.shape
    causal = bool(sizes["causal"])
    device = q8.device
    handle = _handle(device)
    key = (tuple(q8.shape), tuple(q8.stride()), tuple(k8.stride()), tuple(v8.stride()), causal, str(device))
    if key not in _GRAPHS:
        _GRAPHS[key] = _build(q8, k8, v8, causal, handle)
    built = _GRAPHS[key]
    t = built.tensors
    bound = {t["Q"]: q8, t["K"]: k8, t["V"]: v8, t["Amax_O"]: built.amax_o,
             **{t[name]: inputs[name].reshape(1, 1, 1, 1) for name in ("descale_q", "descale_k", "descale_v")},
             **{t[name]: value for name, value in built.scales.items()}}

    def call() -> Outputs:
        cudnn.set_stream(handle, torch.cuda.current_stream(device).cuda_stream)
        out = torch.empty(batch, heads, seq, dim, dtype=torch.bfloat16, device=device)
        stats = torch.empty(batch, heads, seq, 1, dtype=torch.float32, device=device)
        built.graph.execute({**bound, t["O"]: out, t["Stats"]: stats}, built.workspace, handle=handle)
        return {"O": out, "LSE": stats.view(batch, heads, seq)}
    return warmed(call)
