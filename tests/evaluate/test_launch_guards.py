"""The timed calls' trace judged against a trial: what a candidate launches when timed must be what it
launched when checked (pure functions; the orchestration tests drive them through the evaluator)."""

from __future__ import annotations

from ptxbench.evaluate.judgement.guards import host_transfer_guards, profiled_launch_guards, timed_launch_guards
from ptxbench.evaluate.judgement.launches import ONE_TIME_LAUNCHES, launch_difference, launch_signature, launches_of
from ptxbench.records.evaluation import Guard, KernelProfile

KERNEL = "void (anonymous namespace)::rmsnorm_kernel<256>(float const*, float*)"


def _timed(per_call: list[dict], calls: int, extra: list[dict] | None = None) -> dict:
    flush = {"name": "reduce_kernel<amax>", "stream": 9, "kind": "kernel"}
    return {"stream": 9, "rounds": calls, "activities": ([flush] + per_call) * calls + (extra or []),
            "harness_kernels": [flush["name"]]}


def _kernel(stream: int = 9, grid: list[int] | None = None, name: str = KERNEL) -> dict:
    return {"name": name, "stream": stream, "kind": "kernel", "grid": grid or [132, 1, 1], "block": [256, 1, 1]}


def test_signatures_agree_between_the_trace_and_nsight_compute() -> None:
    assert launch_signature(KERNEL, [132, 1, 1], [256, 1, 1]) == "rmsnorm_kernel grid=132,1,1 block=256,1,1"
    assert launch_signature("rmsnorm_kernel", "(132, 1, 1)", "(256, 1, 1)") == launch_signature(KERNEL, [132, 1, 1],
                                                                                                   [256, 1, 1])
    assert launch_signature("Memset (Device)") == "Memset"


def test_an_honest_candidate_launches_the_same_when_timed() -> None:
    trial = launches_of([_kernel(stream=7)], 7)
    assert timed_launch_guards("w", trial, _timed([_kernel()], 40), {"rmsnorm_kernel"}) == []


def test_one_time_work_of_a_fresh_process_is_not_a_difference() -> None:
    trial = launches_of([_kernel(stream=7)], 7)
    init = [{"name": "Memset (Device)", "stream": 9, "kind": "memset"}] * ONE_TIME_LAUNCHES
    assert timed_launch_guards("w", trial, _timed([_kernel()], 40, init), {"rmsnorm_kernel"}) == []
    assert launch_difference(trial, {**trial, "Memset": ONE_TIME_LAUNCHES + 1}, 1) is not None


def test_skipping_the_work_in_some_timed_calls_is_a_difference() -> None:
    trial = launches_of([_kernel(stream=7)], 7)
    lazy = _timed([], 30, [_kernel()] * 10)  # the kernel ran in 10 of 30 timed calls
    findings = timed_launch_guards("w", trial, lazy, {"rmsnorm_kernel"})
    assert [f.guard for f in findings] == [Guard.LAUNCHES_DIFFER]
    assert "0.333333 per call instead of 1" in findings[0].detail


def test_another_grid_when_timed_is_a_difference() -> None:
    trial = launches_of([_kernel(stream=7)], 7)
    findings = timed_launch_guards("w", trial, _timed([_kernel(grid=[1, 1, 1])], 20), {"rmsnorm_kernel"})
    assert Guard.LAUNCHES_DIFFER in {f.guard for f in findings}


def test_other_streams_foreign_kernels_and_host_copies_when_timed_are_found() -> None:
    trial = launches_of([_kernel(stream=7)], 7)
    timed = _timed([_kernel(stream=13), _kernel(name="void nvjet_sm90_gemm(float*)"),
                    {"name": "Memcpy DtoH (Device -> Pageable)", "stream": 9, "kind": "memcpy"}], 10)
    guards = {f.guard for f in timed_launch_guards("w", trial, timed, {"rmsnorm_kernel"})}
    assert {Guard.OTHER_STREAM, Guard.FOREIGN_KERNELS, Guard.HOST_TRANSFER, Guard.LAUNCHES_DIFFER} <= guards


def test_a_copy_to_the_host_is_found_beside_own_kernels() -> None:
    activities = [_kernel(stream=7), {"name": "Memcpy DtoH (Device -> Pinned)", "stream": 7, "kind": "memcpy"}]
    assert [f.guard for f in host_transfer_guards(activities)] == [Guard.HOST_TRANSFER]
    assert host_transfer_guards([_kernel(stream=7), {"name": "Memcpy DtoD (Device -> Device)", "stream": 7}]) == []


def _profiled(name: str = "rmsnorm_kernel", grid: tuple[int, int, int] = (132, 1, 1)) -> KernelProfile:
    return KernelProfile(launch_id=0, name=name, grid=grid, block=(256, 1, 1))


def test_the_profiled_call_must_launch_what_the_trial_launched() -> None:
    trial = launches_of([_kernel(stream=7), {"name": "Memset (Device)", "stream": 7, "kind": "memset"}], 7)
    assert profiled_launch_guards(trial, [_profiled()]) == []  # ncu sees no runtime copies
    token = profiled_launch_guards(trial, [_profiled("wgmma_token", (1, 1, 1)), _profiled()])
    assert [f.guard for f in token] == [Guard.LAUNCHES_DIFFER] and "wgmma_token" in token[0].detail
    assert profiled_launch_guards(trial, [_profiled(grid=(66, 1, 1))])  # another grid under the profiler
    assert profiled_launch_guards(trial, [])  # nothing of its own ran under the profiler


def test_without_launch_shapes_in_the_trial_kernels_are_compared_by_name() -> None:
    trial = launches_of([{"name": KERNEL, "stream": 7, "kind": "kernel"}], 7)
    assert profiled_launch_guards(trial, [_profiled()]) == []
    assert profiled_launch_guards(trial, [_profiled(), _profiled()])


def test_setup_uploaded_once_per_shape_is_not_a_difference() -> None:
    """An expert GEMM (fast.cu's kernel 12, wrapped) uploads its tile schedule on the first call of a shape:
    the trial (that first call) copies once, the timed calls almost never. Seen on the H200, where the guard
    rejected it ("Memcpy HtoD: 0.006 per call instead of 1")."""
    upload = {"name": "Memcpy HtoD (Pageable -> Device)", "stream": 7, "kind": "memcpy"}
    trial = launches_of([upload, _kernel(stream=7)], 7)
    timed = _timed([_kernel()], 166, [{**upload, "stream": 9}])
    assert timed_launch_guards("w", trial, timed, {"rmsnorm_kernel"}) == []
    assert launch_difference(trial, {"rmsnorm_kernel grid=132,1,1 block=256,1,1": 166}, 166) is None


def test_setup_copies_more_often_or_kernels_less_often_when_timed_still_differ() -> None:
    upload = {"name": "Memcpy HtoD (Pageable -> Device)", "stream": 7, "kind": "memcpy"}
    trial = launches_of([upload, _kernel(stream=7)], 7)
    twice = _timed([{**upload, "stream": 9}, {**upload, "stream": 9}, _kernel()], 20)
    assert [f.guard for f in timed_launch_guards("w", trial, twice, {"rmsnorm_kernel"})] == [Guard.LAUNCHES_DIFFER]
    lazy = _timed([{**upload, "stream": 9}], 20, [_kernel()] * 5)
    assert [f.guard for f in timed_launch_guards("w", trial, lazy, {"rmsnorm_kernel"})] == [Guard.LAUNCHES_DIFFER]
    copy_within = launches_of([{"name": "Memcpy DtoD (Device -> Device)", "stream": 7}, _kernel(stream=7)], 7)
    assert launch_difference(copy_within, {"rmsnorm_kernel grid=132,1,1 block=256,1,1": 10}, 10) is not None
