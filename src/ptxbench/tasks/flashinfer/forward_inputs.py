"""An attention backward's forward inputs: ``O`` and the log-sum-exp ``L`` (or ``LSE``) that a backward takes
must be the forward of its ``Q, K, V``, or the gradients are of no attention at all (drawn at random, ``L``
makes ``P = exp(S - L)`` rows that do not sum to one). So they are derived, by the forward the definition
describes: softmax of ``Q K^T / sqrt(D)`` (causal where the definition is), natural-log LSE unless its
description says base 2 — as the original PTXBench's traces made them (their blobs hold such a forward)."""

from __future__ import annotations

from typing import NamedTuple

from ptxbench.tasks.flashinfer.schema import Definition


class ForwardPlan(NamedTuple):
    q: str
    k: str
    v: str
    out: str
    lse: str
    causal: bool
    base2: bool

    @property
    def derived(self) -> list[str]:
        return [self.out, self.lse]


def plan_forward(definition: Definition) -> ForwardPlan | None:
    """The forward inputs of a dense attention backward over ``[B, H, S, D]``; None for any other definition."""
    backward = "bwd" in definition.name or "backward" in definition.tag("direction")
    if definition.op_type != "attention" or not backward:
        return None
    names = {n.upper(): n for n in definition.inputs}
    lse = names.get("LSE") or names.get("L")
    if not all(n in names for n in ("Q", "K", "V", "O")) or lse is None:
        return None
    q, out, stats = (definition.inputs[n] for n in (names["Q"], names["O"], lse))
    if not q.shape or len(q.shape) != 4 or out.shape != q.shape or stats.shape != q.shape[:3]:
        return None
    text = " ".join([definition.description or "", stats.description or ""]).lower()
    causal = "causal" in definition.name or "true" in definition.tag("causal")
    base2 = any(word in text for word in ("2-based", "base-2", "base 2", "log2"))
    return ForwardPlan(names["Q"], names["K"], names["V"], names["O"], lse, causal, base2)
