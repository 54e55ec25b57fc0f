"""Find the CUDA tools PTXBench drives: nvcc and ptxas to build, cuobjdump and nvdisasm to read SASS,
Nsight Compute's ``ncu`` (optional) to count executed instructions, and ``compute-sanitizer`` (optional) to
say where a failed call went wrong. Each one's version goes into the run header.

Search order per tool: ``PTXBENCH_<TOOL>`` (an explicit path; ``-`` written ``_``), ``$CUDA_HOME/bin`` and
``$CUDA_PATH/bin``, ``PATH``, NVIDIA's wheels in the running interpreter's site-packages
(``nvidia/cu13/bin`` and friends; these wheels install no entry points), then ``/usr/local/cuda/bin``.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from ptxbench.errors import ToolchainMissing

TOOL_NAMES = ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "ncu", "compute-sanitizer")
# Without ncu executed instructions stay unverified, without the sanitizer a failed call is not diagnosed;
# nothing else stops.
OPTIONAL_TOOLS = frozenset({"ncu", "compute-sanitizer"})

INSTALL_HINTS = {
    "nvcc": "install the CUDA toolkit (13.0 or newer) or `pip install nvidia-cuda-nvcc`, or set CUDA_HOME",
    "ptxas": "ptxas ships with nvcc: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`",
    "cuobjdump": "`pip install nvidia-cuda-cuobjdump` (or `pip install 'ptxbench[cuda-tools]'`)",
    "nvdisasm": "`pip install nvidia-cuda-nvdisasm` (or `pip install 'ptxbench[cuda-tools]'`)",
    "ncu": "install Nsight Compute to prove executed instructions (else: unverified)",
    "compute-sanitizer": "it ships with the CUDA toolkit: install it to have failed calls diagnosed",
}

WHEEL_BIN_DIRS = ("nvidia/cu13/bin", "nvidia/cuda_nvcc/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvdisasm/bin")


class Tool(BaseModel):
    """One located tool and where it came from (shown by ``ptxbench doctor``)."""

    name: str
    path: str | None
    version: str | None = None
    found_via: str | None = None


class Toolchain(BaseModel):
    tools: dict[str, Tool]

    def path(self, name: str) -> str:
        """The tool's path, or a ToolchainMissing error that says how to get it."""
        tool = self.tools.get(name)
        if tool is None or tool.path is None:
            raise ToolchainMissing(f"{name} not found. Fix: {INSTALL_HINTS[name]}.")
        return tool.path

    def has(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.path is not None

    def missing(self) -> list[str]:
        """The required tools not found (an optional one, ncu, is not among them)."""
        return [name for name, tool in self.tools.items() if tool.path is None and name not in OPTIONAL_TOOLS]

    def fingerprint(self) -> str:
        """Versions that change compiled output; part of every compile cache key."""
        return ";".join(f"{n}={t.version}" for n, t in sorted(self.tools.items()) if n in ("nvcc", "ptxas"))


def _candidate_dirs() -> list[tuple[Path, str]]:
    dirs: list[tuple[Path, str]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append((Path(os.environ[var]) / "bin", var))
    return dirs


def _wheel_dirs() -> list[tuple[Path, str]]:
    roots = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    roots += [site.getusersitepackages()] if hasattr(site, "getusersitepackages") else []
    roots += [p for p in sys.path if p.endswith("site-packages")]
    seen: set[Path] = set()
    found: list[tuple[Path, str]] = []
    for root in roots:
        for sub in WHEEL_BIN_DIRS:
            path = Path(root) / sub
            if path not in seen and path.is_dir():
                seen.add(path)
                found.append((path, "NVIDIA wheel"))
    return found


def _version(path: str) -> str | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = (re.search(r"release (\d+\.\d+), V([\d.]+)", out) or re.search(r"cuda_([\d.]+)", out)
             or re.search(r"^Version (\d[\d.]*)", out, re.MULTILINE))  # the last: Nsight Compute's
    if not match:
        return None
    return match.group(2) if match.lastindex == 2 else match.group(1)


def override_variable(name: str) -> str:
    """The variable that names a tool's path explicitly: PTXBENCH_NCU, PTXBENCH_COMPUTE_SANITIZER."""
    return f"PTXBENCH_{name.upper().replace('-', '_')}"


def locate(name: str) -> Tool:
    override = os.environ.get(override_variable(name))
    if override:
        exists = Path(override).is_file()
        return Tool(name=name, path=override if exists else None, found_via=override_variable(name),
                    version=_version(override) if exists else None)
    searched = _candidate_dirs()
    for directory, via in searched:
        if (directory / name).is_file():
            return Tool(name=name, path=str(directory / name), version=_version(str(directory / name)), found_via=via)
    on_path = shutil.which(name)
    if on_path:
        return Tool(name=name, path=on_path, version=_version(on_path), found_via="PATH")
    for directory, via in [*_wheel_dirs(), (Path("/usr/local/cuda/bin"), "/usr/local/cuda")]:
        if (directory / name).is_file():
            return Tool(name=name, path=str(directory / name), version=_version(str(directory / name)), found_via=via)
    return Tool(name=name, path=None)


# What steers the search: a tool is looked for again only when one of these changes.
_SEARCH_VARIABLES = ("PATH", "CUDA_HOME", "CUDA_PATH", *(override_variable(name) for name in TOOL_NAMES))


def find_toolchain() -> Toolchain:
    """Every tool, located once per process and search environment (a PATH or override set later, as a
    test's fake ncu, is searched anew rather than answered from the first search)."""
    return _located(tuple(os.environ.get(variable) for variable in _SEARCH_VARIABLES))


@lru_cache(maxsize=8)
def _located(_search: tuple[str | None, ...]) -> Toolchain:
    return Toolchain(tools={name: locate(name) for name in TOOL_NAMES})


def cuda_include_dir(nvcc_path: str) -> Path | None:
    """The include directory nvcc itself uses (asked of nvcc, since it may be a wrapper script)."""
    try:
        out = subprocess.run([nvcc_path, "--dryrun", "-c", "ptxbench-probe.cu"], capture_output=True, text=True,
                             timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'INCLUDES="-I([^"\s]+)', out)
    if not match:
        return None
    include = Path(match.group(1)).resolve()
    return include if include.is_dir() else None
