"""The kernel tracer's own UserWarnings (torch.profiler over kineto) are silenced where the harness starts and
stops it, and nowhere else: a run of the examples printed about 20 of them, while every other warning must
still be seen."""

from __future__ import annotations

import ast
import inspect
import warnings

from ptxbench.evaluate.child import gpu_side
from ptxbench.evaluate.child.gpu_side import quiet_tracer

# As PyTorch raises them: a TORCH_WARN from the C++ side (module of the Python frame that called into it, the
# source location appended) and the Python profiler's note when a tracer is started again.
REASSOCIATED = ("Failed to recover relationship between all profiler and kineto events: 7 vs. 0  reassociated. "
                "(Triggered internally at /pytorch/torch/csrc/profiler/collection.cpp:1027.)")
CLEARED = ("Warning: Profiler clears events at the end of each cycle. Only events from the current cycle will be "
           "reported. To keep events across cycles, set acc_events=True.")


def test_the_tracers_notes_are_hidden_and_every_other_warning_is_shown() -> None:
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_tracer():
            warnings.warn_explicit(REASSOCIATED, UserWarning, "profiler.py", 434, module="torch.autograd.profiler")
            warnings.warn_explicit(CLEARED, UserWarning, "profiler.py", 300, module="torch.profiler.profiler")
            warnings.warn("the candidate's library printed this", UserWarning)
            warnings.warn(REASSOCIATED, DeprecationWarning)  # the text alone does not silence another category
        warnings.warn_explicit(REASSOCIATED, UserWarning, "profiler.py", 434, module="torch.autograd.profiler")
    assert [(w.category, str(w.message)) for w in seen] == [
        (UserWarning, "the candidate's library printed this"), (DeprecationWarning, REASSOCIATED),
        (UserWarning, REASSOCIATED)], "only inside, only the tracer's notes"
    assert warnings.filters == before, "no filter is left behind for the process"


def test_every_start_and_stop_of_the_tracer_is_quiet_and_no_filter_is_global() -> None:
    tree = ast.parse(inspect.getsource(gpu_side))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def quiet(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.With) and any(
                    isinstance(item.context_expr, ast.Call) and getattr(item.context_expr.func, "id", "") == "quiet_tracer"
                    for item in node.items):
                return True
        return False

    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    traced = [c for c in calls if getattr(c.func, "id", "") == "profile" and isinstance(parents[c], ast.withitem)]
    started = [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr in ("start", "stop")]
    assert len(traced) == 4 and len(started) == 2, "the tracer's starts and stops in the worker"
    assert all(quiet(call) for call in traced + started)
    filters = [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr in ("filterwarnings", "simplefilter")]
    assert filters and all(_inside(c, "quiet_tracer", parents) for c in filters), "a filter set for the whole process"


def _inside(node: ast.AST, function: str, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return True
    return False
