"""What a gated delta net (``op_type gdn``) task needs beyond the generic mapping.

- **Inputs**: the model L2-normalises ``q`` and ``k`` before the kernel; the definitions' references do not.
  The delta rule ``S <- (I - beta k k^T) g S + beta k v^T`` multiplies the state by ``1 - beta |k|^2`` along
  ``k``, so keys drawn N(0, 1) over 128 dims (``|k|^2`` near 128) grow it several-fold per token (on the
  CPU, with decay 0.9, a [128, 128] state overflowed fp32 at token 79). ``q`` and ``k`` are drawn with
  scale ``1/sqrt(K)`` (``|k|^2`` near 1, as normalised): the same state stayed near its start over 200 tokens.
- **Tensor cores** (chunked prefill): the chunked form runs the state products on the tensor cores, with the
  state as an operand; bf16 inputs give bf16 products, and the state takes tf32 (or bf16), so either counts
  toward the FLOP share.
- **Tolerance** (chunked prefill): the new state is fp32, but as a tensor-core operand it is rounded every
  chunk, so four units in the last place of fp32 (1e-5) cannot be met by the kernels the task asks for. Its
  fp32 outputs take four units of tf32 (2^-9). A CPU simulation of a recurrence over 512 tokens, 8 heads,
  K = V = 128, with the state rounded to tf32 before every product (harsher than once a chunk), gave a
  largest state error of 2.7e-4 of the state's rms, and its bf16 output met the bf16 default; rounded to
  bf16 instead, the state still met 2^-9 but the output did not meet its default (so tf32 it is).
"""

from __future__ import annotations

import math
from typing import Any

from ptxbench.tasks.flashinfer.schema import Definition
from ptxbench.tasks.flashinfer.work import is_chunked_prefill

NORMALISED = ("q", "k")
STATE_FEATURES = {"sm_90a": "wgmma.tf32", "sm_100a": "tcgen05.mma.tf32"}
_TF32_ULP4 = 2.0 ** -9


def drawn_scale(definition: Definition, name: str) -> float | None:
    """The draw scale of a gdn input that the model normalises (``q``, ``k``: ``1/sqrt(K)``), else None."""
    spec = definition.inputs.get(name)
    if definition.op_type != "gdn" or name not in NORMALISED or spec is None or not spec.shape:
        return None
    size = definition.axes.get(spec.shape[-1])
    value = getattr(size, "value", None)
    return 1.0 / math.sqrt(value) if value else None


def tolerances(definition: Definition) -> dict[str, dict[str, Any]]:
    """The chunked prefill's fp32 outputs (its new state): four units of tf32, with the reason."""
    if not is_chunked_prefill(definition):
        return {}
    reason = ("the chunked form keeps the state in fp32 but takes it as a tensor-core operand (tf32 or bf16) "
              "every chunk: four units in the last place of tf32")
    return {name: {"rtol": _TF32_ULP4, "rms_atol": _TF32_ULP4, "reason": reason}
            for name, spec in definition.outputs.items() if spec.dtype == "float32" and spec.shape}
