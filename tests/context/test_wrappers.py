"""The wrapper header as the harness handles it: pasted into candidates from the bundle only, with the
file's own line numbers, and each wrapper's targets read from the header's guards."""

from __future__ import annotations

import re

from ptxbench.arch.registry import Arch
from ptxbench.context import wrappers
from ptxbench.context.wrappers import inline_wrapper_header


def test_the_header_has_one_section_per_target_and_a_shared_one() -> None:
    full = wrappers._read(wrappers.HEADER_NAME)
    sections = re.findall(r"^// (sm_\w+) only:", full, flags=re.MULTILINE)
    assert sorted(sections) == ["sm_100a", "sm_90a"]
    assert "__CUDA_ARCH_FEAT_SM90_ALL" in full and "__CUDA_ARCH_FEAT_SM100_ALL" in full
    assert all(len(wrappers.wrapper_header(arch)) < len(full) for arch in (Arch.SM_90A, Arch.SM_100A))


def test_wrapper_include_is_inlined_from_the_bundle_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.check import read_candidate

    candidate = tmp_path / "k.cu"
    candidate.write_text('#include "ptx_wrappers.cuh"\n#include "other.cuh"\nint x;\n')
    (tmp_path / "ptx_wrappers.cuh").write_text("// a local impostor that must not be read\n")
    source = read_candidate(candidate)
    assert "namespace ptx {" in source and "impostor" not in source
    assert '#include "other.cuh"' in source and source.endswith("int x;\n")
    assert source.count("inlined by PTXBench") == 1
    plain = "#include <cuda_runtime.h>\nint y;\n"
    assert inline_wrapper_header(plain) == plain
    assert "namespace ptx {" in inline_wrapper_header("#include <ptxbench/ptx_wrappers.cuh>\n")


def test_inlined_wrapper_header_keeps_the_files_line_numbers() -> None:
    source = "// one\n#include \"ptx_wrappers.cuh\"\nint three;\nint four;\n"
    lines = inline_wrapper_header(source).splitlines()
    assert lines[0] == "// one" and lines[2] == '#line 1 "ptx_wrappers.cuh"'
    header = wrappers._read(wrappers.HEADER_NAME).splitlines()
    inlined = lines[3:3 + len(header)]
    assert len(inlined) == len(header) and all(a == b for a, b in zip(inlined, header) if b != "#pragma once"), \
        "the header's own lines, numbered as in its file"
    resume = lines.index('#line 3 "candidate.cu"')
    assert lines[resume + 1:] == ["int three;", "int four;"]
    assert not any(line.strip() == "#pragma once" for line in lines)


def test_wrapper_targets_are_read_from_the_headers_guards() -> None:
    assert wrappers.wrapper_targets("wgmma_fence") == {Arch.SM_90A}
    assert wrappers.wrapper_targets("setmaxnreg_inc") == {Arch.SM_90A, Arch.SM_100A}
    assert wrappers.wrapper_targets("tmem_addr") == {Arch.SM_100A}
    assert wrappers.wrapper_targets("smem_u32") is None and wrappers.wrapper_targets("no_such_wrapper") is None


def test_a_one_shot_example_is_shown_without_line_directives(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.refine.loop import load_one_shot

    example = tmp_path / "rmsnorm.cu"
    example.write_text('#include "ptx_wrappers.cuh"\nint x;\n')
    shown = load_one_shot(f"rmsnorm:{example}")
    assert shown is not None and "namespace ptx {" in shown.source and "#line" not in shown.source


def test_every_path_builds_an_answer_that_includes_the_header_alike(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model's answer graded by ``run`` (its text), the same answer saved and given to ``eval`` (its file) and
    a server's job build one and the same source: the include is pasted in once, wherever it is read."""
    from ptxbench.check import check_file, check_source
    from ptxbench.kernels import reference_folder
    from ptxbench.tasks.loader import get_task

    answer = (reference_folder("sm_90a") / "transpose.cu").read_text()
    assert '#include "ptx_wrappers.cuh"' in answer
    saved = tmp_path / "candidate.cu"
    saved.write_text(answer)
    task = get_task("transpose")
    as_text, as_file = check_source(answer, Arch.SM_90A, task), check_file(saved, Arch.SM_90A, task)
    assert as_text.build.ok, as_text.build.diagnosis
    assert as_text.source_sha256 == as_file.source_sha256
    assert inline_wrapper_header(inline_wrapper_header(answer)) == inline_wrapper_header(answer)
