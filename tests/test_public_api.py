"""The package's public names: each one resolves to what it says, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ptxbench


@pytest.mark.parametrize("name", [n for n in ptxbench.__all__ if n != "__version__"])
def test_every_public_name_resolves_to_its_definition(name: str) -> None:
    value = getattr(ptxbench, name)
    assert getattr(value, "__name__", name) == name
    assert value.__module__ == ptxbench._PUBLIC[name]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        ptxbench.nosuch  # noqa: B018


def test_importing_the_package_imports_none_of_the_heavy_parts() -> None:
    probe = ("import sys, ptxbench; heavy = [m for m in ('torch', 'numpy', 'ptxbench.evaluate.fleet.run', 'pydantic') "
             "if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
