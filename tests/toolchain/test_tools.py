"""The external tools run from toolchain/tools.py: nvidia-smi asked by one function for the run header and
for doctor, and c++filt's absence costing only readable names (fakes on PATH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.doctor import run_doctor
from ptxbench.toolchain.tools import demangle, driver_version, query_gpus

SMI = """#!/bin/sh
case "$1" in
  --query-gpu=driver_version) echo "570.86.15"; echo "570.86.15" ;;
  --query-gpu=name,driver_version,compute_cap) echo "NVIDIA H200, 570.86.15, 9.0"; echo "NVIDIA H200, 570.86.15, 9.0" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


def _on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, script: str) -> None:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(script)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))


def test_the_driver_version_and_doctors_gpu_line_come_from_one_query(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _on_path(tmp_path, monkeypatch, "nvidia-smi", SMI)
    assert driver_version() == "570.86.15"
    assert query_gpus(["name", "driver_version", "compute_cap"]) == ["NVIDIA H200, 570.86.15, 9.0"] * 2
    gpu = next(c for c in run_doctor().checks if c.name == "gpu")
    assert gpu.ok and gpu.detail == "NVIDIA H200, 570.86.15, 9.0\nNVIDIA H200, 570.86.15, 9.0"


def test_an_nvidia_smi_that_cannot_start_costs_the_driver_version_only(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _on_path(tmp_path, monkeypatch, "nvidia-smi", "#!/nonexistent/interpreter\n")
    assert driver_version() is None, "the run goes on without it"
    gpu = next(c for c in run_doctor().checks if c.name == "gpu")
    assert not gpu.ok and gpu.detail.startswith("nvidia-smi failed:")


def test_without_nvidia_smi_there_is_no_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _on_path(tmp_path, monkeypatch, "unrelated", "#!/bin/sh\n")
    assert query_gpus(["driver_version"]) is None and driver_version() is None


def test_names_stay_mangled_without_a_demangler_and_read_with_one(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _on_path(tmp_path, monkeypatch, "unrelated", "#!/bin/sh\n")
    assert demangle(["_Z6kernelPf"]) == {"_Z6kernelPf": "_Z6kernelPf"}
    _on_path(tmp_path, monkeypatch, "c++filt",
             '#!/bin/sh\nwhile read -r name || [ -n "$name" ]; do echo "readable $name"; done\n')
    assert demangle(["_Z6kernelPf", "_Z5otherv"]) == {"_Z6kernelPf": "readable _Z6kernelPf",
                                                      "_Z5otherv": "readable _Z5otherv"}
