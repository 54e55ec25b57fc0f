"""Say why a built candidate does not export its task's entry point, from the symbols it does export.

Three mistakes look alike from the outside (the C symbol is missing) but have different fixes: an
``extern "C"`` function under another name (rename it), a C++ function named like the entry point whose
parameters differ from the force-included prototype (a new overload, with a mangled name), and a C++
function under another name. The diagnosis names the one it sees, so a user or a model fixes the right
thing.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from ptxbench.records.build import CompileFailure, Diagnosis
from ptxbench.static.elf import dynamic_symbols
from ptxbench.toolchain.tools import demangle

_MANGLED_GLOBAL = re.compile(r"_Z(\d+)")  # a global-scope function: _Z<length><name><parameters>


def check_entry_point(shared_object: Path, entry_point: str, header: str) -> Diagnosis | None:
    """None when ``entry_point`` is exported with C linkage; else the diagnosis of what was found.
    ``header``: the force-included header that declares it."""
    symbols = dynamic_symbols(shared_object.read_bytes())
    return None if entry_point in symbols else missing_entry_point(entry_point, symbols, header)


def missing_entry_point(entry_point: str, symbols: set[str], header: str = "ptxbench_task.h") -> Diagnosis:
    """The diagnosis for a shared object exporting ``symbols`` but not ``entry_point``."""
    functions = sorted(s for s in symbols if not s.startswith("__") and s not in ("_init", "_fini"))
    plain = [s for s in functions if not s.startswith("_Z")]
    mangled = [s for s in functions if s.startswith("_Z")]
    readable = demangle(mangled)
    names = {s: _base_name(s, readable[s]) for s in mangled}

    same = [s for s in mangled if names[s] == entry_point]
    if same:
        shown = readable[same[0]]
        if "::" in shown.split("(")[0]:
            summary = (f"no extern \"C\" function '{entry_point}' is exported: found {shown} inside a namespace; "
                       f"define the entry point at global scope, exactly as declared in {header}")
        else:
            summary = (f"no extern \"C\" function '{entry_point}' is exported: found the C++ function {shown}, "
                       "whose parameters differ from the header's prototype (so it is another overload, with a "
                       f"C++-mangled name); define it exactly as declared in {header}")
    elif close := _closest(entry_point, plain):
        summary = (f"no entry point '{entry_point}': found extern \"C\" '{close}' instead; rename it to "
                   f"'{entry_point}' (declared in {header})")
    elif close := _closest(entry_point, list(names.values())):
        shown = readable[next(s for s in mangled if names[s] == close)]
        summary = (f"no entry point '{entry_point}': found the C++ function {shown} instead; rename it to "
                   f"'{entry_point}' and define it exactly as declared in {header} (C linkage comes with it)")
    elif plain:
        listed = ", ".join(f"'{s}'" for s in plain[:3]) + (", ..." if len(plain) > 3 else "")
        summary = (f"no entry point '{entry_point}' (the extern \"C\" functions exported are {listed}); "
                   f"define '{entry_point}' exactly as declared in {header}")
    else:
        summary = f"no extern \"C\" function '{entry_point}' is defined; define it exactly as declared in {header}"
    return Diagnosis(failure=CompileFailure.MISSING_ENTRY_POINT, summary=summary,
                     first_error=f"missing entry point {entry_point}")


def _base_name(symbol: str, demangled: str) -> str:
    """The function's own name, without namespaces or parameters (``ns::f(int)`` -> ``f``)."""
    if demangled != symbol:
        return demangled.split("(")[0].split("::")[-1].strip()
    match = _MANGLED_GLOBAL.match(symbol)  # no demangler on this machine: global-scope names only
    return symbol[match.end():match.end() + int(match.group(1))] if match else symbol


def _closest(entry_point: str, names: list[str]) -> str | None:
    """The name most like the entry point's (containing it, or close in spelling), if any is."""
    containing = [n for n in names if entry_point.lower() in n.lower() or n.lower() in entry_point.lower()]
    if containing:
        return min(containing, key=len)
    close = difflib.get_close_matches(entry_point, names, n=1, cutoff=0.6)
    return close[0] if close else None
