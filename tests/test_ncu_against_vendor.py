"""benchmarks/ncu_against_vendor.py: the ncu command profiles only the marked call, the raw CSV is read
per launch, and the comparison puts the longest launch of each side next to the other."""

import json

import pytest

from .conftest import REPO, repo_script

tool = repo_script("benchmarks/ncu_against_vendor.py")

FIXTURE = REPO / "tests" / "fixtures" / "ncu" / "h200_cublas_and_example_gemm_1024.csv"


def test_the_command_profiles_the_marked_range_with_clocks_left_alone():
    command = tool.ncu_command(["python3", "x.py"], ["lts__t_bytes.sum"])
    assert command[:6] == ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv"]
    assert command[-2:] == ["python3", "x.py"]
    assert command[command.index("--metrics") + 1] == "lts__t_bytes.sum"
    assert {command[i + 1] for i, part in enumerate(command) if part == "--section"} == set(tool.SECTIONS)


def test_the_vendor_program_names_task_sizes_and_baseline():
    command = tool.vendor_program("gemm_fp8", {"M": 64, "N": 128, "K": 256}, "cublaslt")
    assert command[1] == "-c" and "torch.cuda.profiler.start()" in command[2]
    assert json.loads(command[3]) == {"task": "gemm_fp8", "sizes": {"M": 64, "N": 128, "K": 256}, "baseline": "cublaslt"}


def test_raw_csv_is_read_per_launch_and_the_longest_is_the_main_kernel():
    launches = tool.parse_raw_csv(FIXTURE.read_text())
    assert len(launches) == 4
    assert launches[2]["kernel"].startswith("nvjet_sm90")
    assert launches[2]["metrics"]["gpu__time_duration.sum"][1] == "7,200"
    assert tool.main_kernel(launches)["kernel"].startswith("<unnamed>::gemm_bf16_kernel")


def test_output_without_a_table_is_an_error():
    with pytest.raises(ValueError, match="no ncu CSV table"):
        tool.parse_raw_csv("==ERROR== Failed to find metric foo\n")
    with pytest.raises(ValueError, match="no kernel"):
        tool.main_kernel([])


def test_the_comparison_shows_headline_tensor_and_stall_rows():
    ours = {"kernel": "ours", "metrics": {
        "gpu__time_duration.sum": ["us", "815.6"], "sm__cycles_elapsed.avg.per_second": ["Ghz", "1.80"],
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": ["%", "61.0"],
        "sm__pipe_tensor_op_gmma_cycles_active.max.pct_of_peak_sustained_active": ["%", "62.0"],
        "sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_active": ["%", "0"],
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": ["", "0.5"],
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": ["", "2.5"]}}
    vendor = {"kernel": "nvjet", "metrics": {"gpu__time_duration.sum": ["us", "741.1"]}}
    rows = tool.side_by_side(ours, vendor)
    assert rows[0] == "| time (`gpu__time_duration.sum`) | 815.6 us | 741.1 us |"
    tensor = [row for row in rows if "pipe_tensor" in row]
    assert tensor == ["| `sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active` | 61.0 % | – |"]
    stalls = [row for row in rows if row.startswith("| stall:")]
    assert "barrier" in stalls[0] and "wait" in stalls[1]  # the largest first
