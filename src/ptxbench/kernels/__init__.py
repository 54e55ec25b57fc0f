"""The expert reference kernels (``ptxbench eval --gold``), shipped inside the package.

They are package data rather than files beside the source tree so that an installed wheel finds them
as a clone does: one folder per target architecture, one ``TASK.cu`` per task."""

from __future__ import annotations

from pathlib import Path

REFERENCE_ROOT = Path(__file__).resolve().parent / "reference"


def reference_folder(arch: str) -> Path:
    """The reference kernels for ``arch`` (e.g. ``sm_90a``); the folder may not exist for a new target."""
    return REFERENCE_ROOT / arch
