"""``python -m ptxbench.evaluate.profile_one SO TASK_JSON SIZES_JSON``: the program ncu profiles.

Draws one input set, calls the candidate once to warm up, then once more between
cudaProfilerStart and cudaProfilerStop, so only the candidate's own launches are measured.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path


def main(shared_object: str, task_file: str, sizes_json: str) -> None:
    import torch

    from ptxbench.evaluate.library import CandidateLibrary
    from ptxbench.tasks.model import Task
    from ptxbench.tasks.reference import make_inputs

    task = Task.model_validate_json(Path(task_file).read_text())
    sizes = json.loads(sizes_json)
    library = CandidateLibrary(Path(shared_object), task)
    inputs = make_inputs(task, sizes, secrets.randbits(62), device="cuda")
    outputs = {o.name: torch.empty(o.concrete_shape(sizes), dtype=getattr(torch, o.dtype.value), device="cuda")
               for o in task.outputs}
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    library(inputs, outputs, sizes, stream)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    library(inputs, outputs, sizes, stream)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
