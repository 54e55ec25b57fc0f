"""The proof of what a candidate's kernels really executed: one call under Nsight Compute in its own process
(``profiling``: the profiled program, ncu's report written and read back by the harness, whether the GPU's
counters can be read at all; ``ncu``: a session and its report as processes; ``batching``: under ``sweep``, the
candidates waiting for ncu profiled in one session, each in a process of its own), and the judgement of that
report (``executed``: which required features ran, and how much of the task's arithmetic and bytes their
instructions did). A static report says what a binary contains; only this room says what ran."""
