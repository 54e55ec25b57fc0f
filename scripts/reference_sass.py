"""Did a change to the reference kernels or to ptx_wrappers.cuh change what runs? Builds every reference
kernel (src/ptxbench/kernels/reference/<arch>/*.cu) exactly as the harness builds a candidate (the wrapper
header inlined, the task header force-included, the harness's nvcc flags), disassembles it and compares the
SASS per kernel, addresses and encodings left out. A refactor that claims "no behaviour change" shows it
here without a GPU.

    python scripts/reference_sass.py compare d5a2dcc        # this tree against a git revision's tree
    python scripts/reference_sass.py dump sass.json          # this tree's normalised SASS, per kernel
    python scripts/reference_sass.py baseline                # rewrite the baseline tests/test_reference_sass.py reads

``compare`` builds the revision with its own package (its header, its inlining) in a subprocess, then
prints one line per kernel, from the strongest claim down: identical; registers renamed only (a one-to-one
renaming); registers allocated differently (the same instructions in the same order); or CHANGED, with the
opcode counts that moved and whether the memory, synchronisation and tensor-core instructions keep their
order. Each kernel's list starts with its register, barrier and stack use, so a change there is a change.
A unified diff of every kernel that is not identical goes into --out. Exit status 1 when any kernel is not
identical or exists on one side only.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "tests" / "fixtures" / "reference_sass_sm90a.json"

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "        /*0040*/                   LDC R1, c[0x0][0x28] ;                /* 0x00000a00ff017b82 */"
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*(?:/\* 0x[0-9a-f]+ \*/)?\s*$")


def _without_file_hash(mangled: str) -> str:
    """The kernel's name with its anonymous namespace as ``_GLOBAL__N_``: nvcc names that namespace after
    a hash of the translation unit (``45_GLOBAL__N__7d7b29d2_12_candidate_cu_76da2596``), which changes
    with any edit of the file."""
    at = mangled.find("_GLOBAL__N_")
    digits = re.search(r"\d+$", mangled[:at]) if at > 0 else None
    if digits is None:
        return mangled
    end = at + int(digits.group(0))
    return mangled[:digits.start()] + "11_GLOBAL__N_" + mangled[end:]


def normalise(sass: str) -> dict[str, list[str]]:
    """cuobjdump -sass text -> {mangled kernel: its instructions in order}, without the address comment,
    the encoding and NOPs (padding). Branch targets stay: they are equal when the instructions before
    them are."""
    kernels: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in sass.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = kernels.setdefault(_without_file_hash(function.group(1)), [])
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            text = re.sub(r"\s+", " ", instruction.group(1)).rstrip(" ;")
            if text != "NOP":
                current.append(text)
    return kernels


def instructions(lines: list[str]) -> list[str]:
    """The instruction lines of a kernel's list (without its leading resource line)."""
    return [line for line in lines if not line.startswith("//")]


def opcode(instruction: str) -> str:
    """The full mnemonic of one normalised instruction (its predicate dropped)."""
    words = instruction.split()
    return words[1] if re.fullmatch(r"@!?U?P[T0-9]+", words[0]) and len(words) > 1 else words[0]


_REGISTER = re.compile(r"\b(U?R|U?P)(\d+)\b")


def renamed(lines: list[str]) -> list[str]:
    """The instructions with every register named by the order of its first use (R, UR, P, UP apart;
    RZ, URZ, PT, UPT kept). Two kernels equal in this form differ only in which registers the allocator
    picked: the same instructions in the same order on the same data flow."""
    names: dict[str, str] = {}

    def canonical(match: re.Match[str]) -> str:
        register = match.group(0)
        if register not in names:
            kind = match.group(1)
            names[register] = f"{kind}<{sum(1 for n in names.values() if n.startswith(kind + '<'))}>"
        return names[register]

    return [_REGISTER.sub(canonical, line) for line in lines]


def reference_sass(arch: str) -> dict[str, dict[str, list[str]]]:
    """{reference file stem: normalised SASS per kernel} for this tree's package (on PYTHONPATH)."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_files
    from ptxbench.kernels import reference_folder
    from ptxbench.tasks.loader import get_task

    try:
        from ptxbench.toolchain.tools import disassemble
    except ImportError:  # a revision from before the external tools moved into toolchain/
        from ptxbench.static.sass import disassemble  # type: ignore[no-redef,attr-defined]

    files = sorted(reference_folder(arch).glob("*.cu"))
    found: dict[str, dict[str, list[str]]] = {}
    for path, report in zip(files, check_files([(f, get_task(f.stem)) for f in files], Arch(arch))):
        cubin = report.build.artifact(".cubin")
        if not report.build.ok or cubin is None:
            raise SystemExit(f"{path.name} did not build: {report.build.diagnosis}")
        kernels = normalise(disassemble(cubin))
        assert report.static is not None
        for kernel in report.static.kernels:  # what the allocator settled on leads the kernel's list
            r = kernel.resources
            kernels[_without_file_hash(kernel.name)].insert(0, f"// registers={r.registers} barriers={r.barriers} "
                                                               f"shared={r.shared_bytes} stack={r.stack_frame_bytes}")
        found[path.stem] = kernels
    return found


def summary(found: dict[str, dict[str, list[str]]]) -> dict:
    """Per file and kernel: instruction count, SHA-256 of the normalised SASS, opcode histogram."""
    from ptxbench.toolchain.discover import find_toolchain

    return {"nvcc": find_toolchain().fingerprint(),
            "kernels": {stem: {kernel: {"resources": lines[0], "instructions": len(instructions(lines)),
                                        "sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
                                        "opcodes": dict(sorted(Counter(map(opcode, instructions(lines))).items()))}
                               for kernel, lines in sorted(kernels.items())}
                        for stem, kernels in sorted(found.items())}}


def revision_sass(revision: str, arch: str, scratch: Path) -> dict[str, dict[str, list[str]]]:
    """The references' SASS as built by the package of git ``revision`` (its kernels, header and build)."""
    archive = scratch / "src.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), revision, "src"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(scratch, filter="data")
    out = scratch / "sass.json"
    env = {**os.environ, "PYTHONPATH": str(scratch / "src")}
    subprocess.run([sys.executable, __file__, "dump", str(out), "--arch", arch], check=True, env=env)
    return json.loads(out.read_text())


# What a kernel does to memory, to other threads and to the tensor cores: the instructions whose order is
# the kernel's protocol. Integer and address arithmetic between them is the allocator's and scheduler's.
_PROTOCOL = re.compile(r"^(HGMMA|WARPGROUP|SYNCS|UTMA|UBLK|BAR|MEMBAR|FENCE|USETMAXREG|ELECT|LD|ST|RED|ATOM|"
                       r"SHFL|CCTL|ERRBAR|ACQBULK|EXIT|RET|CALL|WARPSYNC)")


def verdict(before: list[str], after: list[str]) -> str:
    """How two kernels' instruction lists differ, from 'identical' down to a count of changed opcodes."""
    count = len(instructions(after))
    if before == after:
        return f"identical ({count} instructions)"
    if renamed(before) == renamed(after):
        return f"registers renamed only (the same {count} instructions in the same order)"
    erased = lambda lines: [_REGISTER.sub(lambda m: m.group(1), line) for line in lines]  # noqa: E731
    if erased(before) == erased(after):
        return f"registers allocated differently (the same {count} instructions in the same order)"
    histogram = Counter(map(opcode, instructions(after)))
    histogram.subtract(Counter(map(opcode, instructions(before))))
    moved = {k: v for k, v in sorted(histogram.items()) if v}
    protocol = lambda lines: [op for op in map(opcode, instructions(lines)) if _PROTOCOL.match(op)]  # noqa: E731
    order = "in the same order" if protocol(before) == protocol(after) else "DIFFER"
    resources = "" if before[:1] == after[:1] else f"; {before[0][3:]} -> {after[0][3:]}"
    return (f"CHANGED ({len(instructions(before))} -> {count} instructions{resources}; opcode counts "
            f"{moved or 'unchanged'}; memory, synchronisation and tensor-core instructions {order})")


def compare(old: dict[str, dict[str, list[str]]], new: dict[str, dict[str, list[str]]],
            out: Path | None) -> list[str]:
    """One line per kernel; a unified diff per changed kernel into ``out``. Returns the changed ones."""
    changed = []
    for stem in sorted(set(old) | set(new)):
        for kernel in sorted(set(old.get(stem, {})) | set(new.get(stem, {}))):
            before, after = old.get(stem, {}).get(kernel), new.get(stem, {}).get(kernel)
            if before is None or after is None:
                print(f"{stem}: {kernel}: only {'after' if before is None else 'before'}")
                changed.append(kernel)
                continue
            print(f"{stem}: {demangled(kernel)}: {verdict(before, after)}")
            if before == after:
                continue
            changed.append(kernel)
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                diff = difflib.unified_diff(before, after, "before", "after", lineterm="", n=3)
                (out / f"{stem}.{kernel}.diff").write_text("\n".join(diff) + "\n")
    return changed


def demangled(kernel: str) -> str:
    """A kernel's readable name, without the anonymous namespace."""
    from ptxbench.toolchain.tools import demangle

    return demangle([kernel])[kernel].replace("(anonymous namespace)::", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump", help="this tree's normalised SASS as JSON")
    dump.add_argument("path", type=Path)
    against = sub.add_parser("compare", help="this tree against a git revision")
    against.add_argument("revision")
    against.add_argument("--out", type=Path, help="folder for the diffs of changed kernels")
    base = sub.add_parser("baseline", help="rewrite the baseline that tests/test_reference_sass.py reads")
    base.add_argument("path", type=Path, nargs="?", default=BASELINE)
    for command in (dump, against, base):
        command.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()

    if args.command == "dump":
        args.path.write_text(json.dumps(reference_sass(args.arch), indent=1) + "\n")
    elif args.command == "baseline":
        args.path.write_text(json.dumps(summary(reference_sass(args.arch)), indent=1) + "\n")
        print(f"wrote {args.path}")
    else:
        with tempfile.TemporaryDirectory() as scratch:
            old = revision_sass(args.revision, args.arch, Path(scratch))
        changed = compare(old, reference_sass(args.arch), args.out)
        print(f"{len(changed)} kernel(s) changed" if changed else "every kernel's SASS is identical")
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
