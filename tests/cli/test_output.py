"""What the commands print where a newcomer first reads it: a pipe or a CI log, 80 columns, no TTY."""

from __future__ import annotations

from ptxbench.kernels import reference_folder
from ptxbench.tasks.loader import bundled_suite

from ..conftest import REPO
from .newcomer import COLUMNS, cli, one_line, widest_line


def test_check_names_each_kernel_shortly_and_fits_80_columns() -> None:
    result = cli("check", str(reference_folder("sm_90a") / "transpose.cu"),
                 str(REPO / "kernels" / "examples" / "softmax.cu"), "--task", "auto")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert widest_line(out) <= COLUMNS, out
    assert "anonymous namespace" not in out and "…" not in out, out
    lines = out.splitlines()
    for kernel in ("transpose_tma_kernel<8>", "transpose_tma_kernel<12>", "transpose_plain_kernel", "softmax_kernel"):
        assert f"  kernel {kernel}" in lines, out
    assert any(line.startswith("    features in SASS: ") and "tma.store" in line for line in lines), out
    # every line is a file's title, part of a table, or indented under its item (a wrapped explanation too)
    stray = [line for line in lines if not line.startswith((" ", "┏", "┃", "┡", "│", "└")) and " → sm_90a" not in line]
    assert not stray, out


def test_short_kernel_names_drop_return_type_namespace_and_parameters_but_stay_unique() -> None:
    from ptxbench.render import short_kernel_name, short_kernel_names

    assert short_kernel_name("void (anonymous namespace)::decode::gemm_sm90a<64>(CUtensorMap_st, int)") == \
        "decode::gemm_sm90a<64>"
    assert short_kernel_name("void (anonymous namespace)::gemm_fp8<128, false>(float const*, int)") == \
        "gemm_fp8<128, false>"
    assert short_kernel_name("(anonymous namespace)::softmax_kernel(__nv_bfloat16 const*, long)") == "softmax_kernel"
    assert short_kernel_name("scale") == "scale"  # extern "C": nothing to strip
    assert short_kernel_name("void ns::apply(void (*)(int), float*)") == "ns::apply"
    assert short_kernel_names(["void k(float*)", "void k(double*)", "void j(int)"]) == ["k(float*)", "k(double*)", "j"]
    assert short_kernel_names(["k", "k"]) == ["k #1", "k #2"]


def test_tasks_show_reads_cleanly_at_80_columns() -> None:
    for task in bundled_suite():
        result = cli("tasks", "show", task.id)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert widest_line(out) <= COLUMNS, out
        assert "…" not in out, out
        # the statement whole, as paragraphs (nothing in it taken for markup, e.g. softmax's "X[r, c]")
        assert one_line(task.statement) in one_line(out), out
        lines = out.splitlines()
        for workload in task.workloads:  # every workload row on one line: no cell wrapped into ragged columns
            row = next((line for line in lines if line.startswith(workload.name + " ")), None)
            assert row is not None, (workload.name, out)
            assert workload.role.value in row.split() and row.split()[-1].replace(",", "").replace(".", "").isdigit()
        assert any(line.startswith("sm_90a requires: ") for line in lines), out
