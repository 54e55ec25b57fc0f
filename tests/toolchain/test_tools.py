"""The external tools run from toolchain/tools.py: nvidia-smi asked by one function for the run header and
for doctor, c++filt's absence costing only readable names, and cuobjdump run once per cubin's bytes (fakes on
PATH or named by PTXBENCH_CUOBJDUMP)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.doctor import run_doctor
from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.tools import demangle, disassemble, driver_version, query_gpus

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


def test_cuobjdump_reads_each_cubins_bytes_once_and_a_changed_cubin_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    fake = tmp_path / "cuobjdump"
    fake.write_text(f'#!/bin/sh\n[ "$1" = --version ] && exit 0\necho "$2" >> {calls}\ngrep -q broken "$2" && {{ echo "bad cubin" >&2; exit 1; }}\n'
                    'echo "Function : listing of $(cat "$2")"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PTXBENCH_CUOBJDUMP", str(fake))
    first, copy = tmp_path / "a.cubin", tmp_path / "b.cubin"
    first.write_text("kernel one")
    copy.write_text("kernel one")
    assert disassemble(first) == disassemble(first) == disassemble(copy) == "Function : listing of kernel one\n"
    assert calls.read_text().splitlines() == [str(first)], "the same bytes are read once"
    first.write_text("kernel two")
    assert disassemble(first) == "Function : listing of kernel two\n"
    first.write_text("broken")
    for _ in range(2):  # a failure is not kept: each call says it
        with pytest.raises(ToolchainMissing, match="cuobjdump could not read a.cubin: bad cubin"):
            disassemble(first)
    assert calls.read_text().splitlines() == [str(first)] * 4
