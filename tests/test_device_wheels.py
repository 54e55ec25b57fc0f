"""scripts/fetch_device_wheels.sh fetches Liger-Kernel only with --baselines, fa3-fwd only with --fa3 (on the
manylinux_2_24 platform its one wheel is tagged with) and the cuDNN frontend only with --cudnn-frontend (without
its CuTe-DSL dependencies), and names --flashinfer, --fa3 and --cudnn-frontend in its usage;
the package declares the `baselines` extra and ships the baseline-quality summary. The script runs in a copy of the scripts folder
with a fake python3 on PATH that records the downloads: no network, and the tree's .whl/ is untouched."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$PIP_LOG"
"""


def _downloads(tmp_path: Path, *options: str) -> str:
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "fetch_device_wheels.sh", tmp_path / "scripts")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "pip.log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PIP_LOG=str(log))
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "fetch_device_wheels.sh"), *options],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ".whl").is_dir()
    return log.read_text()


def test_liger_kernel_is_fetched_only_with_the_baselines_option(tmp_path: Path) -> None:
    plain = _downloads(tmp_path / "plain")
    assert "pydantic==" in plain and "liger" not in plain
    fetched = _downloads(tmp_path / "baselines", "--baselines")
    line = next(line for line in fetched.splitlines() if "liger" in line)
    assert line.startswith("-m pip download") and "--no-deps" in line and line.endswith("liger-kernel==0.8.5")


def test_fa3_is_fetched_only_with_its_option_for_the_platform_of_its_wheel(tmp_path: Path) -> None:
    assert "fa3" not in _downloads(tmp_path / "plain")
    fetched = _downloads(tmp_path / "fa3", "--fa3")
    line = next(line for line in fetched.splitlines() if "fa3" in line)
    assert "--no-deps" in line and "--platform manylinux_2_24_x86_64" in line and line.endswith("fa3-fwd==0.0.3")


def test_the_cudnn_frontend_is_fetched_only_with_its_option_and_without_dependencies(tmp_path: Path) -> None:
    assert "cudnn" not in _downloads(tmp_path / "plain")
    fetched = _downloads(tmp_path / "cudnn", "--cudnn-frontend")
    line = next(line for line in fetched.splitlines() if "cudnn" in line)
    assert "--no-deps" in line and "--platform manylinux_2_28_x86_64" in line and "--python-version 3.12" in line
    assert line.endswith("nvidia-cudnn-frontend==1.32.0")


def test_an_unknown_option_names_the_baselines_one(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "fetch_device_wheels.sh", tmp_path / "scripts")
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "fetch_device_wheels.sh"), "--nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "[--baselines]" in proc.stderr and "[--flashinfer]" in proc.stderr
    assert "[--fa3]" in proc.stderr and "[--cudnn-frontend]" in proc.stderr


def test_the_package_declares_the_extra_and_ships_the_quality_summary() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["optional-dependencies"]["baselines"] == [
        "liger-kernel>=0.8", "flashinfer-python>=0.7.2,<0.8",
        "fa3-fwd==0.0.3; sys_platform == 'linux' and platform_machine == 'x86_64'",
        "nvidia-cudnn-frontend==1.32.0; sys_platform == 'linux'"]
    shipped = project["tool"]["setuptools"]["package-data"]["ptxbench"]
    assert "tasks/baseline_quality.json" in shipped
    assert (REPO / "src" / "ptxbench" / "tasks" / "baseline_quality.json").is_file()
