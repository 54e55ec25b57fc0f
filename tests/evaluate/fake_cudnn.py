"""A CPU stand-in for the cuDNN frontend (PyPI nvidia-cudnn-frontend, import name ``cudnn``): the graph calls the
cudnn_fp8 baseline makes, with the keyword names of the real ``cudnn.pygraph`` (1.32.0's ``_pygraph.py``) and its
``sdpa_fp8`` binding's docstring, computed in fp32 with plain PyTorch the way the frontend's own reference does
(test/python/sdpa/fp8_ref.py: scores with the descales and attn_scale applied, the unnormalised exp(s - max)
times scale_s rounded to e4m3, P·V times descale_s and descale_v, divided by the row sum, times scale_o; the stats
max + log(sum)), so a test can check the variant's plumbing end to end against the task's reference. With ``log``
the stand-in computes nothing and logs each execute instead (the timed-call audit in test_baselines.py).

It refuses what the real graph would: an sdpa_fp8 without one of its nine positional tensors or with neither
generate_stats nor is_inference, an execute before the plans are built, a variant pack missing a declared
tensor or binding one whose shape, strides or dtype differ from the declaration, stats asked for but not
declared as an output. ``torch.cuda.current_stream`` is replaced by one that names a fixed fake stream, so the
stream the variant hands ``set_stream`` can be checked on the CPU."""

from __future__ import annotations

import enum
import sys
import types
from typing import Any

import pytest
import torch

FAKE_STREAM = 0x5EED


class data_type(enum.Enum):  # noqa: N801 - the real enum's name
    NOT_SET = 0
    FLOAT = 1
    HALF = 2
    BFLOAT16 = 3
    FP8_E4M3 = 4
    FP8_E5M2 = 5
    INT32 = 6


class diagonal_alignment(enum.Enum):  # noqa: N801
    TOP_LEFT = 0
    BOTTOM_RIGHT = 1


class heur_mode(enum.Enum):  # noqa: N801
    A = 0
    B = 1
    FALLBACK = 2


TORCH_DTYPE = {data_type.FLOAT: torch.float32, data_type.HALF: torch.float16, data_type.BFLOAT16: torch.bfloat16,
               data_type.FP8_E4M3: torch.float8_e4m3fn, data_type.FP8_E5M2: torch.float8_e5m2,
               data_type.INT32: torch.int32}


class Handle:
    def __init__(self) -> None:
        self.stream: int | None = 0


class Tensor:
    """A graph tensor: identity-hashed, its setters chain, as in cudnn.graph_types.Tensor."""

    def __init__(self, name: str, dim: list[int] | None, stride: list[int] | None, dtype: Any, virtual: bool) -> None:
        self.name, self.dim, self.stride, self.data_type, self.is_virtual = name, dim, stride, dtype, virtual
        self.is_output = False

    def set_output(self, value: bool) -> "Tensor":
        self.is_output, self.is_virtual = value, not value
        return self

    def set_dim(self, dim: list[int]) -> "Tensor":
        self.dim = list(dim)
        return self

    def set_stride(self, stride: list[int]) -> "Tensor":
        self.stride = list(stride)
        return self

    def set_data_type(self, dtype: Any) -> "Tensor":
        self.data_type = dtype
        return self


class FakeCudnn:
    """The stand-in's state: its graphs, the handles' streams, the launch log when it only counts."""

    def __init__(self, log: list[str] | None, version: int | None) -> None:
        self.log, self.version = log, version
        self.graphs: list[pygraph] = []
        self.streams: list[Any] = []
        self.executed = 0


class pygraph:  # noqa: N801 - the real class's name
    fake: FakeCudnn

    def __init__(self, name: str = "test_graph", io_data_type: Any = None, intermediate_data_type: Any = None,
                 compute_data_type: Any = None, handle: Any = None, **kwargs: Any) -> None:
        self.kwargs = {"io_data_type": io_data_type, "intermediate_data_type": intermediate_data_type,
                       "compute_data_type": compute_data_type, "handle": handle, **kwargs}
        self.inputs: list[Tensor] = []
        self.node: dict[str, Any] | None = None
        self.steps: list[str] = []
        self.fake.graphs.append(self)

    def tensor(self, dim: list[int], stride: list[int] | None = None, data_type: Any = None, is_virtual: bool = False,
               is_pass_by_value: bool = False, ragged_offset: Any = None, reordering_type: Any = None, name: str = "",
               uid: int | None = None, **kwargs: Any) -> Tensor:
        assert ragged_offset is None and not is_pass_by_value and not kwargs
        t = Tensor(name, list(dim), list(stride) if stride is not None else None, data_type, is_virtual)
        self.inputs.append(t)
        return t

    def sdpa_fp8(self, q: Tensor, k: Tensor, v: Tensor, descale_q: Tensor, descale_k: Tensor, descale_v: Tensor,
                 descale_s: Tensor, scale_s: Tensor, scale_o: Tensor, is_inference: Any = None, attn_scale: Any = None,
                 bias: Any = None, use_alibi_mask: bool = False, use_padding_mask: bool = False,
                 use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
                 diagonal_alignment: Any = diagonal_alignment.TOP_LEFT, left_bound: Any = None,
                 right_bound: Any = None, dropout: Any = None, name: str = "", generate_stats: Any = None,
                 stats_use_log2: bool = False, **kwargs: Any) -> list[Tensor]:
        assert all(isinstance(t, Tensor) for t in (q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s,
                                                    scale_o)), "sdpa_fp8's nine tensors are positional and required"
        assert generate_stats is not None or is_inference is not None, "one of generate_stats, is_inference"
        assert bias is None and dropout is None and not (use_alibi_mask or use_padding_mask) and not kwargs
        stats_wanted = bool(generate_stats) if generate_stats is not None else not is_inference
        outputs = [Tensor(f"{name}::{port}", None, None, None, True) for port in ("O", "Stats", "Amax_S", "Amax_O")]
        self.node = {"q": q, "k": k, "v": v, "descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v,
                     "descale_s": descale_s, "scale_s": scale_s, "scale_o": scale_o, "attn_scale": attn_scale,
                     "use_causal_mask": use_causal_mask, "use_causal_mask_bottom_right": use_causal_mask_bottom_right,
                     "diagonal_alignment": diagonal_alignment, "left_bound": left_bound, "right_bound": right_bound,
                     "stats": stats_wanted, "stats_use_log2": stats_use_log2, "outputs": outputs}
        return outputs

    def validate(self) -> None:
        assert self.node is not None
        o, stats = self.node["outputs"][:2]
        assert o.is_output and o.dim is not None and o.stride is not None and o.data_type is not None
        assert not self.node["stats"] or (stats.is_output and stats.dim is not None), "stats not declared"
        self.steps.append("validate")

    def build_operation_graph(self) -> None:
        assert self.steps == ["validate"]
        self.steps.append("build_operation_graph")

    def create_execution_plans(self, heuristics: Any = None) -> None:
        assert self.steps[-1] == "build_operation_graph"
        self.steps.append("create_execution_plans")

    def check_support(self) -> None:
        self.steps.append("check_support")

    def build_plans(self, *args: Any, **kwargs: Any) -> None:
        self.steps.append("build_plans")

    def get_workspace_size(self, handle: Any = None, **kwargs: Any) -> int:
        return 256

    def execute(self, tensor_dict: dict[Any, Any], workspace: Any = None, handle: Any = None, **kwargs: Any) -> None:
        assert "build_plans" in self.steps, "execute before the plans are built"
        node = self.node
        assert node is not None
        declared = [*self.inputs, *(t for t in node["outputs"] if t.is_output)]
        for t in declared:
            assert t in tensor_dict, f"the variant pack lacks {t.name}"
            data = tensor_dict[t]
            assert list(data.shape) == t.dim and list(data.stride()) == t.stride, (t.name, data.shape, data.stride())
            assert data.dtype == TORCH_DTYPE[t.data_type], (t.name, data.dtype, t.data_type)
        assert workspace is not None and workspace.numel() >= 256
        if self.fake.log is not None:
            self.fake.log.append("cudnn.execute")
            return
        self.fake.executed += 1
        value = lambda t: float(tensor_dict[node[t]].reshape(()))  # noqa: E731
        q, k, v = (tensor_dict[node[name]].float() for name in ("q", "k", "v"))
        scale = node["attn_scale"] if node["attn_scale"] is not None else 1.0
        scores = (q @ k.transpose(-1, -2)) * (value("descale_q") * value("descale_k") * scale)
        s_q, s_kv = scores.shape[-2:]
        right = node["right_bound"]
        if node["use_causal_mask"] or node["use_causal_mask_bottom_right"]:
            right = 0
        if right is not None:  # key j visible to query i when j <= i + right (+ s_kv - s_q when bottom-right)
            shift = s_kv - s_q if (node["diagonal_alignment"] == diagonal_alignment.BOTTOM_RIGHT
                                   or node["use_causal_mask_bottom_right"]) else 0
            visible = torch.arange(s_kv)[None, :] <= torch.arange(s_q)[:, None] + shift + right
            scores = scores.masked_fill(~visible, float("-inf"))
        assert node["left_bound"] is None
        peak = scores.amax(dim=-1, keepdim=True)
        u = torch.exp(scores - peak)
        total = u.sum(dim=-1, keepdim=True)
        p8 = (u * value("scale_s")).to(torch.float8_e4m3fn).float()
        o = (p8 @ v) * (value("descale_s") * value("descale_v")) / total * value("scale_o")
        o_t, stats_t, _, amax_t = node["outputs"]
        tensor_dict[o_t].copy_(o)
        if node["stats"]:
            tensor_dict[stats_t].copy_(peak + torch.log(total))
        if amax_t.is_output:
            tensor_dict[amax_t].fill_(float(o.abs().max()))


def install(monkeypatch: pytest.MonkeyPatch, log: list[str] | None = None, version: int | None = None) -> FakeCudnn:
    """``cudnn`` and ``cudnn._pygraph`` in sys.modules for the test's duration, and a current stream that names
    FAKE_STREAM; ``version``: what ``backend_version()`` reports (None: whatever PyTorch reports, as where the
    frontend loaded PyTorch's libcudnn)."""
    fake = FakeCudnn(log, version)
    module = types.ModuleType("cudnn")
    graph_cls = type("pygraph", (pygraph,), {"fake": fake})
    module.pygraph = graph_cls  # type: ignore[attr-defined]
    module.data_type, module.diagonal_alignment, module.heur_mode = data_type, diagonal_alignment, heur_mode  # type: ignore[attr-defined]

    def set_stream(handle: Handle, stream: Any) -> None:
        assert isinstance(handle, Handle), "cudnn.set_stream expects a cudnn.Handle"
        handle.stream = stream
        fake.streams.append(stream)

    module.create_handle = Handle  # type: ignore[attr-defined]
    module.set_stream = set_stream  # type: ignore[attr-defined]
    module.backend_version = lambda: fake.version if fake.version is not None else torch.backends.cudnn.version()  # type: ignore[attr-defined]
    inner = types.ModuleType("cudnn._pygraph")
    inner.pygraph = graph_cls  # type: ignore[attr-defined]
    module._pygraph = inner  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cudnn", module)
    monkeypatch.setitem(sys.modules, "cudnn._pygraph", inner)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=FAKE_STREAM))
    from ptxbench.evaluate.baselines import cudnn_frontend

    monkeypatch.setattr(cudnn_frontend, "_GRAPHS", {})
    monkeypatch.setattr(cudnn_frontend, "_HANDLES", {})
    return fake
