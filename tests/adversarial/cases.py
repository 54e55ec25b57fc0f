"""The adversarial cases as the evaluator must receive them: most are one file; a case with
``base = "reference"`` is the task's packaged reference kernel (its wrapper header inlined) followed by its
file: a cheat that needs a kernel that really does the work with the required features."""

from __future__ import annotations

from pathlib import Path

from ptxbench._compat import tomllib
from ptxbench.context.wrappers import inline_wrapper_header
from ptxbench.kernels import reference_folder

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"


def manifest_cases() -> list[dict]:
    return tomllib.loads(MANIFEST.read_text())["case"] if MANIFEST.is_file() else []


def case_source(case: dict) -> str:
    own = (HERE / case["file"]).read_text()
    if case.get("base") != "reference":
        return own
    reference = (reference_folder("sm_90a") / f"{case['task']}.cu").read_text()
    return f"{inline_wrapper_header(reference)}\n{own}"  # as `eval --gold` builds it: one file, header inlined


def case_file(case: dict, folder: Path) -> Path:
    """A path holding the case's whole source under the case's own file name: the file here, or a
    composed copy in ``folder``."""
    if case.get("base") != "reference":
        return HERE / case["file"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case["file"]
    path.write_text(case_source(case))
    return path
