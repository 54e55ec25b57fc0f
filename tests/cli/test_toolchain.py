"""Every external tool found in one place: ncu is discovered like the CUDA tools, so its version is in the
run header and in ``ptxbench doctor`` (a fake ncu on PATH, tests/evaluate/fake_ncu.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..conftest import EXAMPLES
from ..evaluate.fake_ncu import VERSION, install
from .newcomer import cli


def _search(path: str) -> dict[str, str]:
    """The toolchain search with ``path`` as PATH and no CUDA_HOME, CUDA_PATH or ncu override."""
    return {"PATH": path, "CUDA_HOME": "", "CUDA_PATH": "", "PTXBENCH_NCU": ""}


def _header_toolchain(tmp_path: Path, env: dict[str, str]) -> dict[str, str | None]:
    out = tmp_path / "run"
    result = cli("eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr
    return json.loads((out / "run.json").read_text())["toolchain"]


def test_the_run_header_records_the_ncu_found_on_path(tmp_path: Path) -> None:
    folder = tmp_path / "fake-ncu"
    install(folder)
    toolchain = _header_toolchain(tmp_path, _search(f"{folder}:{os.environ['PATH']}"))
    assert toolchain["ncu"] == VERSION
    assert toolchain["nvcc"] and toolchain["cuobjdump"], "the CUDA tools beside it, as before"


def test_a_machine_without_ncu_says_so_in_the_header_and_in_doctor(tmp_path: Path) -> None:
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "ncu").exists())
    assert _header_toolchain(tmp_path, _search(path))["ncu"] is None
    doctor = cli("doctor", "--json", env=_search(path))
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    ncu = next(c for c in report["checks"] if c["name"] == "ncu")
    assert not ncu["ok"] and ncu["fix"] == "install Nsight Compute to prove executed instructions (else: unverified)"
    assert report["can_check"] is True, "ncu is optional: the static path stays ready"


def test_doctor_shows_where_ncu_was_found_and_its_version(tmp_path: Path) -> None:
    folder = tmp_path / "fake-ncu"
    install(folder)
    doctor = cli("doctor", "--json", env=_search(f"{folder}:{os.environ['PATH']}"))
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    ncu = next(c for c in report["checks"] if c["name"] == "ncu")
    assert ncu["ok"] and ncu["detail"] == f"{folder / 'ncu'} ({VERSION}, via PATH)"
    assert {"name": "ncu", "path": str(folder / "ncu"), "version": VERSION, "found_via": "PATH"} in report["tools"]
