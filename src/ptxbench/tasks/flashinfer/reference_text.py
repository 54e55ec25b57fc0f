"""The imported task's reference code: the definition's own ``run``, wrapped.

- ``reference(**inputs, **sizes)`` calls ``run`` on fp32 copies of the floating inputs, so the reference
  computes in fp32 as every PTXBench reference does; its outputs are returned by name, in fp32. A reference
  that calls a GPU library (cuDNN, DeepGEMM) is given the inputs in their own dtypes, which the library needs.
- ``baseline(**inputs, **sizes)`` calls ``run`` on the inputs as given, in their own dtypes: what
  FlashInfer-Bench times as the reference, and what an imported task's ``reference`` baseline times.
- ``derive_inputs`` (``derive_source``) with the plan and layouts, where the definition has index inputs,
  and with the forward plan, where it is an attention backward (``forward_inputs``).

Scalars are fixed (``_SCALARS``); ``run`` is called by parameter name. A ``run`` that writes into some of
its inputs (``reads.written_inputs``) is given copies of them (``_WRITES_INTO``), so the inputs the harness
drew, and compares the candidate's with after its call, stay as drawn.
"""

from __future__ import annotations

from typing import Any

from ptxbench.tasks.flashinfer import derive_source
from ptxbench.tasks.flashinfer.forward_inputs import ForwardPlan
from ptxbench.tasks.flashinfer.layouts import IndexPlan
from ptxbench.tasks.flashinfer.reads import written_inputs
from ptxbench.tasks.flashinfer.schema import Definition
from ptxbench.tasks.flashinfer.workloads import ImportedWorkload

_WRAPPERS = '''
def _produced(named, cast):
    args = {n: cast(named[n]) for n in _RUN_INPUTS if n not in _SCALARS}
    args.update(_SCALARS)
    produced = run(**args)
    if isinstance(produced, dict):
        produced = tuple(produced[n] for n in _OUTPUTS)
    elif not isinstance(produced, (tuple, list)):
        produced = (produced,)
    return dict(zip(_OUTPUTS, produced))


def reference(**named):
    # the definition's `run` on fp32 copies of its floating inputs: the reference computes in fp32 (unless it
    # calls a library that defines the operation in the inputs' own dtypes: _UPCAST is then False)
    produced = _produced(named, lambda t: t.float() if _UPCAST and t.is_floating_point() else t)
    return {n: t.float() for n, t in produced.items()}


def baseline(**named):
    # the definition's `run` on the inputs as given (their own dtypes): what FlashInfer-Bench times
    return _produced(named, lambda t: t)
'''

_COPIES = '''
_run_in_place = run


def run(**args):
    # the definition's `run` writes into the inputs _WRITES_INTO: it is given copies, so the inputs stay as drawn
    return _run_in_place(**{n: t.clone() if n in _WRITES_INTO else t for n, t in args.items()})
'''


def reference_code(definition: Definition, scalars: dict[str, Any], plan: IndexPlan,
                   workloads: list[ImportedWorkload], axes: list[str], upcast: bool = True,
                   forward: ForwardPlan | None = None) -> str:
    code = [definition.reference.strip("\n"), "", "",
            f"_RUN_INPUTS = {tuple(definition.inputs)!r}", f"_OUTPUTS = {tuple(definition.outputs)!r}",
            f"_SCALARS = {scalars!r}", f"_UPCAST = {upcast!r}", "", _WRAPPERS.strip("\n")]
    written = written_inputs(definition)
    if written:
        code += ["", "", f"_WRITES_INTO = {tuple(written)!r}", _COPIES.rstrip("\n")]
    if plan.derived or forward is not None:
        index_plan = {**plan._asdict(), "axes": axes} if plan.derived else {}
        layouts = {",".join(f"{a}={w.sizes[a]}" for a in sorted(axes)): w.layout for w in workloads} if plan.derived else {}
        forward_plan = forward._asdict() if forward is not None else {}
        code += ["", "", "from typing import Any", "", f"_INDEX_PLAN = {index_plan!r}", f"_LAYOUTS = {layouts!r}",
                 f"_FORWARD_PLAN = {forward_plan!r}", f"_FORWARD_ROWS = {derive_source._FORWARD_ROWS}", "", "",
                 derive_source.source()]
    return "\n".join(code)
