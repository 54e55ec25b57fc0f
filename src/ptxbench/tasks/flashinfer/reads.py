"""What a definition's reference does with its inputs, read from its code: the inputs ``run`` writes into
(``buffer[i] = ...``, or an in-place method such as ``buffer.copy_(...)``), and of those the ones it never
reads otherwise (only tested against ``None``), as GDN MTP's ``intermediate_states_buffer``.

A written input must be given to ``run`` as a copy, or the reference changes the drawn inputs the harness
later compares the candidate's against (its input-mutation guard); an input that is only written is no work
a kernel must read (``work`` counts it as 0 bytes), nor anything it can write (its inputs are const).
"""

from __future__ import annotations

import ast

from ptxbench.tasks.flashinfer.schema import Definition

_IN_PLACE = {"copy_", "zero_", "fill_", "add_", "sub_", "mul_", "div_", "clamp_", "index_copy_", "scatter_",
             "index_put_", "masked_fill_"}


def _root(node: ast.expr) -> str | None:
    """The variable a subscript or attribute chain starts from (``buf`` of ``buf[i].x[j]``)."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _writes(module: ast.AST) -> set[str]:
    written: set[str] = set()
    for node in ast.walk(module):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _IN_PLACE:
            targets = [node.func.value]
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(part, (ast.Subscript, ast.Attribute)) or isinstance(node, ast.Call):
                    name = _root(part)
                    if name:
                        written.add(name)
    return written


def written_inputs(definition: Definition) -> list[str]:
    """The inputs, in their listed order, that the reference writes into (or into a name that may still be the
    input: ``x = x.float()`` is ``x`` itself for an fp32 ``x``, so a rebound name counts too)."""
    try:
        module = ast.parse(definition.reference)
    except SyntaxError:
        return []
    written = _writes(module)
    return [n for n in definition.inputs if n in written and definition.inputs[n].shape is not None]


def unread_inputs(definition: Definition) -> list[str]:
    """The written inputs the reference reads nowhere: every use of them is a write or an ``is (not) None``."""
    module = ast.parse(definition.reference)
    found = []
    for name in written_inputs(definition):
        reads = 0
        for node in ast.walk(module):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                reads += 1
        tests = sum(1 for node in ast.walk(module) if isinstance(node, ast.Compare)
                    and isinstance(node.left, ast.Name) and node.left.id == name
                    and all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                    and all(isinstance(c, ast.Constant) and c.value is None for c in node.comparators))
        stores = sum(1 for node in ast.walk(module) if isinstance(node, (ast.Subscript, ast.Attribute))
                     and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == name)
        if reads == tests + stores:  # a subscript store loads the name itself: `buf[i] = x` reads `buf` once
            found.append(name)
    return found
